"""The ``http`` executor against a real HTTP server on loopback: the request it sends (filled
template, encoded path values, secrets in headers), what it returns, what it refuses, and
that its calls share one TLS context instead of loading the CA bundle per call."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from httpx._transports import default as _transport

from sandgate.errors import InvalidArguments, ToolFailed
from sandgate.tools.executors.http import HttpExecutor
from sandgate.tools.tool import Subject, ToolContext
from tests.fixtures import shared_tls


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        _Handler.seen.append(
            {"path": self.path, "token": self.headers.get("x-token"), "body": json.loads(body)}
        )
        if self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("location", "http://example.invalid/")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        status = 500 if self.path.startswith("/broken") else 200
        answer = json.dumps({"echo": json.loads(body)}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    _Handler.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _context(tmp_path: Path) -> ToolContext:
    return ToolContext(
        tool="notify",
        subject=Subject(sandbox_id="sb", team_id="team"),
        secrets={"TOKEN": "s3cret"},
        home=tmp_path,
        timeout_s=10,
        output_limit=4096,
    )


def _executor(url: str) -> HttpExecutor:
    return HttpExecutor(
        "POST",
        url + "/items/{name}",
        {"x-token": "{secrets.TOKEN}"},
        {"name": "{name}", "count": "{count}"},
    )


def test_the_filled_request_is_sent_and_its_json_answer_returned(
    upstream: str, tmp_path: Path
) -> None:
    result = asyncio.run(_executor(upstream).run({"name": "a b/c", "count": 3}, _context(tmp_path)))
    assert result == {"echo": {"name": "a b/c", "count": 3}}
    assert _Handler.seen == [
        {"path": "/items/a%20b%2Fc", "token": "s3cret", "body": {"name": "a b/c", "count": 3}}
    ]


def test_redirects_and_error_statuses_fail_the_call(upstream: str, tmp_path: Path) -> None:
    for path in ("/moved", "/broken"):
        executor = HttpExecutor("POST", upstream + path, {}, {"x": 1})
        with pytest.raises(ToolFailed, match=r"HTTP (302|500)"):
            asyncio.run(executor.run({}, _context(tmp_path)))


def test_a_line_break_in_a_header_is_refused(upstream: str, tmp_path: Path) -> None:
    executor = HttpExecutor("POST", upstream, {"x-name": "{name}"}, None)
    with pytest.raises(InvalidArguments, match="line break"):
        asyncio.run(executor.run({"name": "x\nEvil: 1"}, _context(tmp_path)))
    assert _Handler.seen == []


def test_calls_share_one_tls_context(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call builds its client, but none loads the CA bundle again (~80 ms of CPU on the
    event loop each time it did)."""
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    # httpx's own behaviour, not the test process's shared context (tests/fixtures/shared_tls).
    monkeypatch.setattr(_transport, "create_ssl_context", shared_tls.httpx_create_ssl_context)
    executor = _executor(upstream)

    async def calls() -> None:
        for count in range(5):
            await executor.run({"name": "n", "count": count}, _context(tmp_path))

    asyncio.run(calls())
    assert len(_Handler.seen) == 5
    assert len(loads) <= 1, loads
