"""Python entry points used by the gateway unit tests (real tools, not mocks)."""

from typing import Any

CALLS: list[dict[str, Any]] = []


def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    CALLS.append(dict(arguments))
    return {"received": arguments, "secret": context.secrets.get("TOKEN")}


async def boom(arguments: dict[str, Any], context: Any) -> None:
    raise RuntimeError(f"failed with {context.secrets.get('TOKEN')}")


ATTEMPTS: dict[str, int] = {}


def flaky(arguments: dict[str, Any], context: Any) -> int:
    """Fails until its third call for ``arguments["key"]``."""
    key = str(arguments.get("key"))
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if ATTEMPTS[key] < 3:
        raise RuntimeError(f"attempt {ATTEMPTS[key]} failed")
    return ATTEMPTS[key]
