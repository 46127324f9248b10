"""Python entry points used by the gateway unit tests (real tools, not mocks)."""

from typing import Any

CALLS: list[dict[str, Any]] = []


def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    CALLS.append(dict(arguments))
    return {"received": arguments, "secret": context.secrets.get("TOKEN")}


async def boom(arguments: dict[str, Any], context: Any) -> None:
    raise RuntimeError(f"failed with {context.secrets.get('TOKEN')}")
