"""A scripted Telegram Bot API server: the one test double of the Telegram channel tests.

A local HTTP server speaking the part of Telegram's Bot API the channel uses
(``POST /bot<token>/<method>``, form or JSON bodies, ``{"ok": ..., "result": ...}`` answers):
``getMe``, ``getUpdates`` (offsets confirm earlier updates, as Telegram does; ``timeout`` long
polls until an update arrives), ``sendMessage``, ``editMessageText``, ``answerCallbackQuery``
and ``sendChatAction``. Tests queue updates (``message``, ``press``) as users would, and every
call the bot makes is recorded, so a test waits for what the bot sent (``wait_for``, woken on
each call, never a sleep) and asserts on it. A request with another token gets 401, as
Telegram answers a revoked token.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["BOT_ID", "Call", "ScriptedBotApi"]

BOT_ID = 700_000_001
#: Form fields whose values are JSON (the rest are text or numbers).
_JSON_FIELDS = {"reply_markup", "allowed_updates", "entities", "reply_parameters"}
_INT_FIELDS = {"chat_id", "message_id", "offset", "timeout", "limit", "reply_to_message_id"}


@dataclass(frozen=True)
class Call:
    """One request the bot made."""

    method: str
    params: dict[str, Any]
    #: For ``sendMessage``: the message id the server gave it.
    message_id: int | None = None
    #: The HTTP status answered (401: another token than the server's).
    status: int = 200


class ScriptedBotApi:
    """Start with ``start()`` (port chosen by the OS); ``url`` is the channel's ``api_url``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[Call] = []
        self._updates: list[dict[str, Any]] = []
        self._next_update = itertools.count(1)
        self._next_message = itertools.count(1000)
        self._changed = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScriptedBotApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._changed:
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # -- what users do --------------------------------------------------------------------

    def message(self, user: int, text: str, *, chat: int | None = None) -> int:
        """A text message from ``user`` in ``chat`` (default: their private chat); returns
        the update id."""
        chat_id = user if chat is None else chat
        return self._add(
            {
                "message": {
                    "message_id": next(self._next_message),
                    "date": int(time.time()),
                    "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
                    "from": {"id": user, "is_bot": False, "first_name": f"user{user}"},
                    "text": text,
                }
            }
        )

    def press(self, user: int, sent: Call, data: str) -> int:
        """``user`` presses the button with ``data`` under the message ``sent``."""
        assert sent.message_id is not None
        return self._add(
            {
                "callback_query": {
                    "id": f"cb{next(self._next_message)}",
                    "from": {"id": user, "is_bot": False, "first_name": f"user{user}"},
                    "chat_instance": "ci",
                    "data": data,
                    "message": {
                        "message_id": sent.message_id,
                        "date": int(time.time()),
                        "chat": {"id": int(sent.params["chat_id"]), "type": "private"},
                        "from": {"id": BOT_ID, "is_bot": True, "first_name": "bot"},
                        "text": sent.params.get("text", ""),
                    },
                }
            }
        )

    # -- what the bot did -----------------------------------------------------------------

    def of(self, method: str, chat: int | None = None) -> list[Call]:
        with self._changed:
            return [
                c
                for c in self.calls
                if c.method == method and (chat is None or c.params.get("chat_id") == chat)
            ]

    def wait_for(
        self, found: Callable[[ScriptedBotApi], Any], timeout: float = 120.0, what: str = ""
    ) -> Any:
        """Returns ``found(self)`` once it is truthy; re-checked after each call the bot
        makes. Fails after ``timeout`` seconds with what the bot sent so far."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = found(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    sent = [(c.method, c.params) for c in self.calls if c.method != "getUpdates"]
                    raise AssertionError(f"never happened: {what}; the bot sent {sent}")
                self._changed.wait(left)

    def texts(self, chat: int) -> list[str]:
        return [str(c.params.get("text", "")) for c in self.of("sendMessage", chat)]

    # -- serving --------------------------------------------------------------------------

    def _add(self, body: dict[str, Any]) -> int:
        with self._changed:
            update_id = next(self._next_update)
            self._updates.append({"update_id": update_id, **body})
            self._changed.notify_all()
            return update_id

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = params.get("offset")
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self._changed:
            if offset is not None:  # confirms every update before it, as Telegram does
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while not self._updates and time.monotonic() < deadline:
                self._changed.wait(deadline - time.monotonic())
            return list(self._updates)

    def _answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method == "getMe":
            bot = {"id": BOT_ID, "is_bot": True, "first_name": "Sandgate", "username": "sg_bot"}
            return 200, {"ok": True, "result": bot}
        if method == "getUpdates":
            return 200, {"ok": True, "result": self._get_updates(params)}
        if method in ("sendMessage", "editMessageText"):
            message_id = params.get("message_id") or next(self._next_message)
            result = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": params["chat_id"], "type": "private"},
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Sandgate"},
                "text": params.get("text", ""),
            }
            return 200, {"ok": True, "result": result, "_message_id": message_id}
        if method in ("answerCallbackQuery", "sendChatAction"):
            return 200, {"ok": True, "result": True}
        return 404, {"ok": False, "error_code": 404, "description": "Not Found"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                _, _, rest = self.path.partition("/bot")
                token, _, method = rest.partition("/")
                params = _params(self.headers.get("Content-Type", ""), raw)
                if token != api.token:
                    status, payload = 401, {"ok": False, "error_code": 401}
                    payload["description"] = "Unauthorized"
                else:
                    status, payload = api._answer(method, params)
                message_id = payload.pop("_message_id", None)
                with api._changed:
                    api.calls.append(Call(method, params, message_id, status))
                    api._changed.notify_all()
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                # A poll of a bot process that was killed meanwhile has no one to read it.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        return Handler


def _params(content_type: str, raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    if content_type.startswith("application/json"):
        return dict(json.loads(raw))
    params: dict[str, Any] = {}
    for key, value in parse_qsl(raw.decode(), keep_blank_values=True):
        if key in _JSON_FIELDS:
            params[key] = json.loads(value)
        elif key in _INT_FIELDS:
            params[key] = int(value)
        else:
            params[key] = value
    return params
