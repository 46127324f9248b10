"""Reports the installed SDK versions and those of the distributions named in the arguments
(an agent framework's own packages); needs no server."""

from __future__ import annotations

import sys
from typing import Any

from _common import run


def scenario(args: list[str]) -> dict[str, Any]:
    return {}


if __name__ == "__main__":
    run(scenario, tuple(sys.argv[1:]))
