"""Strict input at the HTTP edge: request targets, query strings and JSON bodies.

Trust: nothing in a request is believed. What is enforced here, before any route runs:

* **Request targets** (:func:`check_target`): every ``%`` starts a two-hex-digit escape, the
  escaped bytes decode as UTF-8 (no overlong forms such as ``%c0%ae``, no surrogates such as
  ``%ed%a0%80``, no stray ``%ff``), and the raw target is ASCII. Starlette and uvicorn decode
  leniently (``%zz`` left as is, bad bytes turned into U+FFFD); refusing first means every
  later reader sees the one decoding (VAL-02: decoded exactly once). A query key may appear
  once, unless it is one of the few list parameters (:data:`MULTI_VALUED`): ``?path=a&path=b``
  would otherwise be read as ``b`` here and as ``a`` by E2B's envd.
* **JSON bodies** (:class:`StrictJsonBody`): a body that FastAPI or the MCP SDK would parse as
  JSON (no ``Content-Type``, ``application/json`` or ``*+json``) must pass
  :func:`sandgate.strictjson.loads`, so no route ever sees a duplicate key, ``NaN``, a lone
  surrogate, invalid UTF-8, deep nesting or an out-of-range integer.

Refusals are ``400`` JSON ``{"code": 400, "message", "error_code"}`` with ``error_code``
``invalid_url_encoding``, ``invalid_request`` (a repeated query key) or ``invalid_json``.
Not here: traffic to a sandbox's own ports (``api.ports``) is relayed byte for byte and never
decoded by Sandgate, so it is not checked; the service in the sandbox judges its own URLs.
"""

from __future__ import annotations

import email.message
import re
from typing import Annotated, Final
from urllib.parse import parse_qsl, unquote_to_bytes

from pydantic import BeforeValidator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandgate.api.errors import e2b_error_response
from sandgate.errors import InvalidJson, InvalidRequest, InvalidUrlEncoding, SandgateError
from sandgate.strictjson import StrictJsonError, loads

__all__ = [
    "MULTI_VALUED",
    "QueryBool",
    "QueryInt",
    "StrictJsonBody",
    "check_target",
    "decimal",
    "is_json_body",
    "parse_query",
]

#: Query keys that are lists by contract (E2B ``GET /v2/sandboxes?state=running&state=paused``,
#: ``GET /sandboxes/metrics?sandbox_ids=a&sandbox_ids=b`` as the JS client sends it).
MULTI_VALUED: Final = frozenset({"state", "sandbox_ids"})
_BAD_ESCAPE: Final = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_DECIMAL: Final = re.compile(r"^(?:0|-?[1-9][0-9]{0,18})$")


def decimal(value: object) -> int:
    """A query or header value as an integer: canonical decimal text only (``"10"``; not
    ``"+10"``, ``" 10"``, ``"010"``, ``"1_0"``, ``"1.0"``, other scripts' digits or 20+ digits).
    Query values are text by nature; this is the one coercion applied to them."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    raise ValueError("must be a decimal integer without sign, spaces or leading zeros")


def _boolean(value: object) -> bool:
    if value in ("true", "false"):
        return value == "true"
    raise ValueError("must be true or false")


#: A query parameter holding an integer (see :func:`decimal`).
QueryInt = Annotated[int, BeforeValidator(decimal)]
#: A query parameter holding ``true`` or ``false`` (not ``1``, ``yes``, ``on``).
QueryBool = Annotated[bool, BeforeValidator(_boolean)]


def _check_part(raw: bytes, what: str, *, ascii_only: bool = True) -> None:
    if ascii_only and not raw.isascii():
        raise InvalidUrlEncoding(
            f"the request {what} has raw non-ASCII bytes: percent-encode them as UTF-8"
        )
    bad = _BAD_ESCAPE.search(raw)
    if bad is not None:
        shown = raw[bad.start() : bad.start() + 3].decode("ascii", "replace")
        raise InvalidUrlEncoding(
            f"the request {what} has a malformed percent-escape {shown!r}: "
            "write a literal '%' as %25"
        )
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidUrlEncoding(
            f"the request {what} escapes bytes that are not UTF-8 (overlong and surrogate "
            "forms included): percent-encode the UTF-8 bytes of the text"
        ) from None


def check_target(scope: Scope) -> None:
    """Raises ``InvalidUrlEncoding`` (or ``InvalidRequest`` for a repeated query key) unless the
    request's path and query are strictly percent-encoded UTF-8."""
    raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
    _check_part(raw_path, "path")
    query: bytes = scope.get("query_string", b"")
    if query:
        _check_part(query, "query")
        seen: set[str] = set()
        for key, _ in parse_qsl(query.decode("ascii"), keep_blank_values=True):
            if key in seen and key not in MULTI_VALUED:
                raise InvalidRequest(
                    f"query parameter {key[:64]!r} is given more than once: send it once"
                )
            seen.add(key)


def parse_query(text: str) -> list[tuple[str, str]]:
    """A query string nested in a parameter (E2B's ``metadata=k%3Dv``), decoded strictly:
    raises ``InvalidUrlEncoding`` where ``parse_qsl`` would guess."""
    _check_part(text.encode("utf-8", "surrogateescape"), "query parameter", ascii_only=False)
    return parse_qsl(text, keep_blank_values=True, errors="strict")


def is_json_body(scope: Scope) -> bool:
    """Whether FastAPI (and the MCP SDK) would read this request's body as JSON."""
    content_type = None
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            content_type = value.decode("latin-1")
            break
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


class StrictJsonBody:
    """Refuses a JSON request body that is not strict JSON, before the app reads it.

    Expects the body already buffered (``BodyLimit`` sits outside): it reads the request
    messages, checks the body, then replays them to the app unchanged.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_json_body(scope):
            await self._app(scope, receive, send)
            return
        messages: list[Message] = []
        body = bytearray()
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                break
        if body.strip():
            try:
                loads(body)
            except StrictJsonError as exc:
                await _refuse(InvalidJson(exc.describe("request body")), scope, send)
                return

        async def replayed() -> Message:
            if messages:
                return messages.pop(0)
            return await receive()

        await self._app(scope, replayed, send)


async def _refuse(error: SandgateError, scope: Scope, send: Send) -> None:
    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await e2b_error_response(error)(scope, nothing, send)
