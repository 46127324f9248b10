"""Filling ``{param}`` and ``{secrets.NAME}`` into request templates (no format-string
attribute access: only plain names are substituted)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from sandgate.errors import InvalidArguments

_PLACEHOLDER = re.compile(r"\{(secrets\.)?([A-Za-z_][A-Za-z0-9_]*)\}")


def fill(
    template: str,
    arguments: dict[str, Any],
    secrets: dict[str, str],
    escape: Callable[[str], str] = str,
) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if match.group(1):
            if name not in secrets:
                raise InvalidArguments(f"template needs secret '{name}' the tool does not declare")
            return escape(secrets[name])
        if name not in arguments or arguments[name] is None:
            raise InvalidArguments(f"argument '{name}' is required by this tool's request")
        value = arguments[name]
        return escape(value if isinstance(value, str) else json.dumps(value))

    return _PLACEHOLDER.sub(replace, template)


def fill_json(body: Any, arguments: dict[str, Any], secrets: dict[str, str]) -> Any:
    """A body template: a string that is exactly ``{param}`` takes the argument's JSON value."""
    if isinstance(body, str):
        whole = _PLACEHOLDER.fullmatch(body)
        if whole is not None and not whole.group(1):
            name = whole.group(2)
            if name not in arguments:
                raise InvalidArguments(f"argument '{name}' is required by this tool's request")
            return arguments[name]
        return fill(body, arguments, secrets)
    if isinstance(body, dict):
        return {k: fill_json(v, arguments, secrets) for k, v in body.items()}
    if isinstance(body, list):
        return [fill_json(v, arguments, secrets) for v in body]
    return body
