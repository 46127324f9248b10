"""Which Unix user a data-plane request acts as: ``Authorization: Basic base64("<user>:")``
for RPCs, ``?username=`` for ``/files``; absent means the sandbox's default user."""

from __future__ import annotations

import base64
import binascii
import re

from starlette.requests import Request

from sandgate.api.e2b.connect import RpcError

_USERNAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def parse_username(raw: str) -> str:
    if not _USERNAME.match(raw):
        raise RpcError("unauthenticated", f"invalid username: '{raw[:64]}'")
    return raw


def request_user(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise RpcError("unauthenticated", "malformed Basic authorization header") from None
    user = decoded.split(":", 1)[0]
    return parse_username(user) if user else None
