"""Reports the installed SDK versions; needs no server."""

from __future__ import annotations

from typing import Any

from _common import run


def scenario(args: list[str]) -> dict[str, Any]:
    import e2b
    import e2b_code_interpreter

    return {"modules": [e2b.__name__, e2b_code_interpreter.__name__]}


if __name__ == "__main__":
    run(scenario)
