"""A scripted model server: the one test double of the agent tests.

A local HTTP server speaking the OpenAI chat-completions API (``POST /v1/chat/completions``)
and the Anthropic messages API (``POST /v1/messages``), answering from a script instead of a
model. Each model name has its own queue of replies; a reply is text, a code block, native
tool calls, an HTTP error status, or a function of the request (for replies that depend on
what the agent sent back). ``repeat`` replies are never used up (a model stuck in a loop).
Every request is recorded, so a test can assert on what the agent sent.

Token usage is counted the same way for both APIs: a quarter of the characters of the
request's messages (system prompt and tool definitions included) and of the reply, so
benchmarks can compare how much context two agent modes send.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ScriptedModelServer", "code", "error", "text", "tool_call"]


@dataclass(frozen=True)
class Reply:
    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    status: int = 200
    repeat: bool = False
    #: Computes the reply from the request body (takes precedence over the fields above).
    respond: Callable[[dict[str, Any]], Reply] | None = None


def text(value: str, *, repeat: bool = False) -> Reply:
    return Reply(text=value, repeat=repeat)


def code(source: str, language: str = "python", *, repeat: bool = False) -> Reply:
    return Reply(text=f"I'll run this.\n\n```{language}\n{source.strip()}\n```\n", repeat=repeat)


def tool_call(name: str, arguments: dict[str, Any], *, repeat: bool = False) -> Reply:
    return Reply(tool_calls=((name, arguments),), repeat=repeat)


def error(status: int, *, repeat: bool = False) -> Reply:
    return Reply(status=status, repeat=repeat)


@dataclass
class Recorded:
    api: str  # "openai" | "anthropic"
    model: str
    body: dict[str, Any]
    status: int
    usage: dict[str, int] = field(default_factory=dict)


class ScriptedModelServer:
    """Start with ``start()`` (port chosen by the OS); ``openai_url``/``anthropic_url`` are the
    base URLs to give the SDKs."""

    def __init__(self) -> None:
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, model: str, *replies: Reply) -> None:
        """Replaces ``model``'s queue with ``replies``."""
        with self._lock:
            self._scripts[model] = deque(replies)

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self.requests.clear()

    def for_model(self, model: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.model == model]

    # -- serving --------------------------------------------------------------------------

    def _next(self, model: str, body: dict[str, Any]) -> Reply:
        with self._lock:
            queue = self._scripts.get(model)
            if not queue:
                return Reply(status=599, text=f"no scripted reply left for model {model!r}")
            reply = queue[0] if queue[0].repeat else queue.popleft()
        return reply.respond(body) if reply.respond is not None else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/chat/completions"):
                    api = "openai"
                elif self.path.endswith("/messages"):
                    api = "anthropic"
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                model = str(body.get("model", ""))
                reply = server._next(model, body)
                record = Recorded(api, model, body, reply.status)
                with server._lock:
                    server.requests.append(record)
                if reply.status != 200:
                    status = 500 if reply.status == 599 else reply.status
                    message = reply.text or f"scripted status {reply.status}"
                    payload = (
                        {"error": {"message": message, "type": "scripted"}}
                        if api == "openai"
                        else {"type": "error", "error": {"type": "scripted", "message": message}}
                    )
                    self._send(status, payload)
                    return
                prompt_tokens = _count(body)
                completion_tokens = max(
                    1, (len(reply.text) + len(json.dumps(reply.tool_calls))) // 4
                )
                record.usage = {"prompt": prompt_tokens, "completion": completion_tokens}
                if api == "openai":
                    self._send(200, _openai(model, reply, prompt_tokens, completion_tokens))
                else:
                    self._send(200, _anthropic(model, reply, prompt_tokens, completion_tokens))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _count(body: dict[str, Any]) -> int:
    parts = [body.get("system", ""), body.get("messages", []), body.get("tools", [])]
    return max(1, len(json.dumps(parts)) // 4)


def _openai(model: str, reply: Reply, prompt: int, completion: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for n, (name, args) in enumerate(reply.tool_calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _anthropic(model: str, reply: Reply, prompt: int, completion: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [
        {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args}
        for n, (name, args) in enumerate(reply.tool_calls)
    ]
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }
