"""``allowInternetAccess`` as the SDK reads it back: one sandbox created with the SDK's default
flag, one with ``allow_internet_access=False``; ``get_info`` of each, then kill both."""

from __future__ import annotations

from typing import Any

from _common import attempt, run
from e2b import Sandbox


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    default = Sandbox.create("base")
    try:
        off = Sandbox.create("base", allow_internet_access=False)
        try:
            out["default"] = default.get_info().allow_internet_access
            out["default_static"] = Sandbox.get_info(default.sandbox_id).allow_internet_access
            out["off"] = off.get_info().allow_internet_access
        finally:
            attempt(off.kill)
    finally:
        attempt(default.kill)
    return out


if __name__ == "__main__":
    run(scenario)
