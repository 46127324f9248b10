"""Strict input on every edge (issue 12, class 4), against a real server on both runtimes.

Each edge is sent a document that would *act* (create a sandbox, change a timeout, make a
directory, start a process, feed a process's stdin, call a tool, run code), with one strict-JSON
violation spliced into the object the action reads. Every edge must answer a 4xx with the stable
code ``invalid_json`` and must not act; the same document without the violation must act
(``test_strict_valid_document_is_acted_on_at_every_edge``), which proves each probe could fail.

The edges: the E2B control plane (create, timeout), ``/v1/policy/dry-run``, ``/v1/agents``
runs, MCP over HTTP, envd Connect (unary, server stream, client stream) and the gateway socket
inside a sandbox. Edges without a server of their own have their own tests: config files
(``tests/unit/test_config.py``), the guest protocol (``tests/unit/guest/test_daemon.py``), the
code interpreter's HTTP parser, which runs inside the ``code-interpreter-v1`` image
(``tests/unit/interpreter/test_http.py``), and the decoder (``tests/unit/test_strictjson.py``).
"""

from __future__ import annotations

import base64
import json
import secrets
import shlex
import sqlite3
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.fixtures.server import RunningServer
from tests.framework.envd import CommandResult, create, envd_headers, run
from tests.framework.sandbox_http import wait_for

AGENT = "strict-agent"
STRICT_CONFIG = f"""
agents:
  - id: {AGENT}
tools:
  - name: kv
    kind: builtin
policy:
  rules:
    - id: strict-kv
      effect: allow
      subject: {{agent: {AGENT}}}
      tool: kv
"""
_ENVELOPE = struct.Struct(">BI")


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


#: One violation per case, as a JSON member spliced after the action's own members.
LONE_SURROGATES = {
    "escaped_high": b', "note": "\\ud800"',
    "escaped_low": b', "note": "x\\udfffy"',
    "reversed_pair": b', "note": "\\udc00\\ud800"',
    "in_a_key": b', "\\ud83d": 1',
}
INVALID_UTF8 = {
    "stray_byte": b', "note": "\xff"',
    "overlong_dot": b', "note": "\xc0\xae"',
    "encoded_surrogate": b', "note": "\xed\xa0\x80"',
    "truncated": b', "note": "\xe2\x82"',
}
NON_FINITE = {
    "nan": b', "note": NaN',
    "infinity": b', "note": Infinity',
    "minus_infinity": b', "note": -Infinity',
    "float_overflow": b', "note": 1e400',
}
DEPTH = {"depth_65": b', "note": ' + _nested(65), "depth_5000": b', "note": ' + _nested(5000)}
INTEGERS = {
    "int64_max_plus_one": b', "note": 9223372036854775808',
    "int64_min_minus_one": b', "note": -9223372036854775809',
    "5000_digits": b', "note": 1' + b"0" * 5000,
}


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return _ENVELOPE.pack(flags, len(payload)) + payload


@dataclass
class Refusal:
    """What an edge answered: the HTTP status and the stable code it carried."""

    status: int
    code: str | None
    detail: str


@dataclass
class Box:
    """A running sandbox: its create response, and commands inside it."""

    server: RunningServer
    created: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.created["sandboxID"])

    @property
    def token(self) -> str:
        return str(self.created["envdAccessToken"])

    def run(self, command: str) -> CommandResult:
        return run(self.server.url, self.id, self.token, command)

    def exists(self, marker: str) -> bool:
        """Whether anything named ``/tmp/strict-<marker>*`` exists in the sandbox."""
        result = self.run(f"ls -d /tmp/strict-{marker}* 2>/dev/null | wc -l")
        assert result.exit_code == 0, result
        return int(result.stdout) > 0

    def kill(self) -> None:
        httpx.delete(
            f"{self.server.url}/sandboxes/{self.id}",
            headers={"X-API-Key": self.server.api_key},
        )


@dataclass
class Ctx:
    """What the edges act on: one server per runtime and a base sandbox acting as the agent
    (gateway socket, kv)."""

    server: RunningServer
    box: Box
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))
    mcp_session: str | None = None
    #: What a probe saw before sending, by marker (read back by its ``acted`` check).
    notes: dict[str, Any] = field(default_factory=dict)
    #: Sandboxes a probe created, killed after the test.
    created: list[Box] = field(default_factory=list)

    def stored(self, sql: str, marker: str) -> int:
        """Rows of the server's own SQLite store matching ``sql`` (one ``?`` = marker)."""
        db = sqlite3.connect(f"file:{self.server.home / 'sandgate.db'}?mode=ro", uri=True)
        try:
            (count,) = db.execute(sql, (f"%{marker}%",)).fetchone()
        finally:
            db.close()
        return int(count)

    @property
    def api(self) -> dict[str, str]:
        return {"X-API-Key": self.server.api_key}

    def kv_get(self, key: str) -> Any:
        reply = self.socket_line(
            json.dumps({"tool": "kv", "arguments": {"op": "get", "key": key}}).encode()
        )
        assert reply["ok"], reply
        return reply["result"]

    def socket_line(self, line: bytes) -> dict[str, Any]:
        """Sends one raw line to the gateway socket from inside the sandbox; its reply."""
        encoded = base64.b64encode(line + b"\n").decode()
        script = (
            "import base64, socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "s.connect('/run/sandgate/gateway.sock')\n"
            f"s.sendall(base64.b64decode('{encoded}'))\n"
            "sys.stdout.write(s.makefile('rb').readline().decode())\n"
        )
        result = self.box.run(f"python3 -c {shlex.quote(script)}")
        assert result.exit_code == 0, result
        reply: dict[str, Any] = json.loads(result.stdout)
        return reply


@dataclass(frozen=True)
class Edge:
    """An edge: ``send(ctx, marker, member)`` posts the action for ``marker`` with ``member``
    spliced in; ``acted(ctx, marker)`` says whether that action happened (None: the edge has
    no side effect to look for); ``dup`` repeats a key the action reads."""

    name: str
    dup: bytes
    send: Callable[[Ctx, str, bytes], Refusal]
    acted: Callable[[Ctx, str], bool] | None


def _rest(response: httpx.Response) -> Refusal:
    try:
        body = response.json()
    except ValueError:
        return Refusal(response.status_code, None, response.text[:300])
    code = body.get("error_code") if isinstance(body, dict) else None
    return Refusal(response.status_code, code, response.text[:300])


def _connect_code(status: int, error: dict[str, Any] | None, text: str) -> Refusal:
    """Connect errors carry ``invalid_argument``; Sandgate's stable code leads the message."""
    if error is None:
        return Refusal(status, None, text)
    message = str(error.get("message", ""))
    stable = message.split(":", 1)[0] if error.get("code") == "invalid_argument" else None
    return Refusal(400 if error.get("code") == "invalid_argument" else status, stable, message)


# -- the edges --------------------------------------------------------------------------------


def _create(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    body = b'{"templateID": "base", "timeout": 120, "metadata": {"strict": "%s"}%s}' % (
        marker.encode(),
        member,
    )
    response = ctx.http.post(
        f"{ctx.server.url}/v2/sandboxes",
        content=body,
        headers={**ctx.api, "content-type": "application/json"},
    )
    if response.status_code == 201:
        ctx.created.append(Box(ctx.server, response.json()))
    return _rest(response)


def _created(ctx: Ctx, marker: str) -> bool:
    return ctx.stored("SELECT count(*) FROM sandboxes WHERE metadata LIKE ?", marker) > 0


def _end_at(ctx: Ctx) -> str:
    info = ctx.http.get(f"{ctx.server.url}/sandboxes/{ctx.box.id}", headers=ctx.api)
    assert info.status_code == 200, info.text
    return str(info.json()["endAt"])


def _timeout(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    ctx.notes[marker] = _end_at(ctx)
    seconds = 1000 + int(marker[:4], 16)  # differs from the box's own 900 s
    response = ctx.http.post(
        f"{ctx.server.url}/sandboxes/{ctx.box.id}/timeout",
        content=b'{"timeout": %d%s}' % (seconds, member),
        headers={**ctx.api, "content-type": "application/json"},
    )
    return _rest(response)


def _timeout_changed(ctx: Ctx, marker: str) -> bool:
    return _end_at(ctx) != ctx.notes[marker]


def _dry_run(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    body = b'{"tool": "kv", "agent": "%s", "arguments": {"op": "get", "key": "%s"%s}}' % (
        AGENT.encode(),
        marker.encode(),
        member,
    )
    response = ctx.http.post(
        f"{ctx.server.url}/v1/policy/dry-run",
        content=body,
        headers={**ctx.api, "content-type": "application/json"},
    )
    return _rest(response)


def _run_stored(ctx: Ctx, marker: str) -> bool:
    return ctx.stored("SELECT count(*) FROM agent_runs WHERE message LIKE ?", marker) > 0


def _agent_run(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    response = ctx.http.post(
        f"{ctx.server.url}/v1/agents/{AGENT}/runs",
        content=b'{"message": "strict %s"%s}' % (marker.encode(), member),
        headers={**ctx.api, "content-type": "application/json"},
    )
    return _rest(response)


def _mcp_headers(ctx: Ctx) -> dict[str, str]:
    headers = {
        **ctx.api,
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    if ctx.mcp_session is None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "strict-test", "version": "1"},
            },
        }
        response = ctx.http.post(
            f"{ctx.server.url}/v1/mcp?agent={AGENT}", json=init, headers=headers
        )
        assert response.status_code == 200, response.text
        ctx.mcp_session = response.headers["mcp-session-id"]
        done = ctx.http.post(
            f"{ctx.server.url}/v1/mcp?agent={AGENT}",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**headers, "mcp-session-id": ctx.mcp_session},
        )
        assert done.status_code == 202, done.text
    return {**headers, "mcp-session-id": ctx.mcp_session}


def _mcp(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    headers = _mcp_headers(ctx)
    ctx.notes[marker] = _tool_calls(ctx)
    body = (
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "kv", '
        b'"arguments": {"op": "set", "key": "%s", "value": 1%s}}}' % (marker.encode(), member)
    )
    response = ctx.http.post(
        f"{ctx.server.url}/v1/mcp?agent={AGENT}", content=body, headers=headers
    )
    return _rest(response)


def _tool_calls(ctx: Ctx) -> int:
    """``tool.call`` records in the server's audit log so far."""
    path = ctx.server.home / "audit" / "audit.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return sum(1 for line in lines if json.loads(line).get("event") == "tool.call")


def _kv_set(ctx: Ctx, marker: str) -> bool:
    """Whether the call ran: it left an audit record, or the key it sets exists."""
    audited = _tool_calls(ctx) > ctx.notes[marker]
    return audited or ctx.kv_get(marker) is not None


def _envd_unary(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    response = ctx.http.post(
        f"{ctx.server.url}/filesystem.Filesystem/MakeDir",
        content=b'{"path": "/tmp/strict-%s"%s}' % (marker.encode(), member),
        headers={
            **envd_headers(ctx.box.id, ctx.box.token),
            "content-type": "application/json",
            "connect-protocol-version": "1",
        },
    )
    try:
        error = response.json() if response.status_code != 200 else None
    except ValueError:
        return Refusal(response.status_code, None, response.text[:300])
    return _connect_code(response.status_code, error, response.text[:300])


def _stream_call(ctx: Ctx, box: Box, method: str, body: bytes) -> Refusal:
    response = ctx.http.post(
        f"{ctx.server.url}/{method}",
        content=body,
        headers={
            **envd_headers(box.id, box.token),
            "content-type": "application/connect+json",
            "connect-protocol-version": "1",
        },
    )
    if response.status_code != 200:
        return Refusal(response.status_code, None, response.text[:300])
    data, offset, error = response.content, 0, None
    while offset < len(data):
        flags, length = _ENVELOPE.unpack_from(data, offset)
        message = json.loads(data[offset + 5 : offset + 5 + length])
        offset += 5 + length
        if flags & 0x02:
            error = message.get("error")
    return _connect_code(200, error, response.text[:300])


def _envd_stream(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    message = (
        b'{"process": {"cmd": "/bin/mkdir", "args": ["/tmp/strict-%s"]%s}, "stdin": false}'
        % (
            marker.encode(),
            member,
        )
    )
    return _stream_call(ctx, ctx.box, "process.Process/Start", envelope(message))


def _start_in_background(ctx: Ctx, command: str, tag: str) -> None:
    """Starts ``sh -c command`` with stdin open and leaves it running (the stream is closed
    once the start event arrived; a process outlives its watchers)."""
    message = {
        "process": {"cmd": "/bin/sh", "args": ["-c", command]},
        "tag": tag,
        "stdin": True,
    }
    with ctx.http.stream(
        "POST",
        f"{ctx.server.url}/process.Process/Start",
        content=envelope(json.dumps(message).encode()),
        headers={
            **envd_headers(ctx.box.id, ctx.box.token),
            "content-type": "application/connect+json",
            "connect-protocol-version": "1",
        },
    ) as response:
        assert response.status_code == 200
        seen = b""
        for chunk in response.iter_bytes():
            seen += chunk
            if b'"start"' in seen:
                return
    raise AssertionError(f"{command!r} did not start: {seen!r}")


def _envd_client_stream(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    """StreamInput into ``head -c 6 > /tmp/strict-in-<marker>``, found by its tag."""
    tag = f"strict-{marker}"
    _start_in_background(ctx, f"head -c 6 > /tmp/strict-in-{marker}", tag)
    first = envelope(b'{"start": {"process": {"tag": "%s"}}}' % tag.encode())
    data = envelope(
        b'{"data": {"input": {"stdin": "%s"%s}}}' % (base64.b64encode(marker[:6].encode()), member)
    )
    return _stream_call(
        ctx, ctx.box, "process.Process/StreamInput", first + data + envelope(b"{}", 0x02)
    )


def _fed(ctx: Ctx, marker: str) -> bool:
    result = ctx.box.run(f"cat /tmp/strict-in-{marker} 2>/dev/null; true")
    return result.stdout == marker[:6]


def _socket(ctx: Ctx, marker: str, member: bytes) -> Refusal:
    ctx.notes[marker] = _tool_calls(ctx)
    line = b'{"tool": "kv", "arguments": {"op": "set", "key": "%s", "value": 1%s}}' % (
        marker.encode(),
        member,
    )
    reply = ctx.socket_line(line)
    if reply.get("ok"):
        return Refusal(200, None, json.dumps(reply)[:300])
    error = reply["error"]
    return Refusal(int(error["status"]), str(error["code"]), str(error["message"]))


def _in_sandbox(ctx: Ctx, marker: str) -> bool:
    return ctx.box.exists(marker)


EDGES = [
    Edge("e2b-create", b', "templateID": "base"', _create, _created),
    Edge("e2b-timeout", b', "timeout": 5', _timeout, _timeout_changed),
    Edge("v1-dry-run", b', "key": "other"', _dry_run, None),
    Edge("v1-agent-run", b', "message": "other"', _agent_run, _run_stored),
    Edge("mcp-http", b', "key": "other"', _mcp, _kv_set),
    Edge("envd-unary", b', "path": "/tmp/strict-other"', _envd_unary, _in_sandbox),
    Edge("envd-server-stream", b', "args": ["/tmp/strict-other"]', _envd_stream, _in_sandbox),
    Edge("envd-client-stream", b', "stdin": "b3RoZXI="', _envd_client_stream, _fed),
    Edge("gateway-socket", b', "key": "other"', _socket, _kv_set),
]
EDGE_IDS = [edge.name for edge in EDGES]


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_server(runtime_server_factory: Callable[..., RunningServer]) -> RunningServer:
    return runtime_server_factory(config=STRICT_CONFIG)


@pytest.fixture(scope="module")
def agent_box(strict_server: RunningServer) -> Iterator[Box]:
    box = Box(
        strict_server,
        create(
            strict_server.url,
            strict_server.api_key,
            timeout=900,
            metadata={"sandgate.agent": AGENT},
        ),
    )
    yield box
    box.kill()


@pytest.fixture
def ctx(strict_server: RunningServer, agent_box: Box) -> Iterator[Ctx]:
    context = Ctx(strict_server, agent_box)
    yield context
    for box in context.created:
        box.kill()
    agent_box.run("pkill -f '/tmp/strict-i[n]-' || true")  # readers still waiting for input
    context.http.close()


def _refused(ctx: Ctx, edge: Edge, member: bytes) -> Refusal:
    """Sends the violating document; asserts the stable refusal and that nothing happened."""
    marker = secrets.token_hex(6)
    refusal = edge.send(ctx, marker, member)
    assert 400 <= refusal.status < 500, (edge.name, refusal)
    assert refusal.code == "invalid_json", (edge.name, refusal)
    if edge.acted is not None:
        assert not edge.acted(ctx, marker), f"{edge.name} acted on a refused document"
    return refusal


# -- the class, edge by edge -----------------------------------------------------------------


@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_valid_document_is_acted_on_at_every_edge(ctx: Ctx, edge: Edge) -> None:
    """The control: without the violation each probe is accepted and acts."""
    marker = secrets.token_hex(6)
    answer = edge.send(ctx, marker, b"")
    assert answer.code is None and answer.status in (200, 201, 204), (edge.name, answer)
    if edge.acted is not None:
        acted = edge.acted
        wait_for(lambda: acted(ctx, marker), 10, f"{edge.name} to act")


@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_duplicate_keys_refused_at_every_edge(ctx: Ctx, edge: Edge) -> None:
    refusal = _refused(ctx, edge, edge.dup)
    assert "duplicate key" in refusal.detail or "twice" in refusal.detail, refusal


@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_nested_duplicate_key_refused_at_every_edge(ctx: Ctx, edge: Edge) -> None:
    _refused(ctx, edge, b', "note": [{"a": {"b": 1, "b": 2}}]')


@pytest.mark.parametrize("case", list(LONE_SURROGATES), ids=list(LONE_SURROGATES))
@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_lone_surrogate_refused_at_every_edge(ctx: Ctx, edge: Edge, case: str) -> None:
    refusal = _refused(ctx, edge, LONE_SURROGATES[case])
    assert "surrogate" in refusal.detail, refusal


@pytest.mark.parametrize("case", list(INVALID_UTF8), ids=list(INVALID_UTF8))
@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_invalid_utf8_refused_at_every_edge(ctx: Ctx, edge: Edge, case: str) -> None:
    refusal = _refused(ctx, edge, INVALID_UTF8[case])
    assert "UTF-8" in refusal.detail, refusal


@pytest.mark.parametrize("case", list(NON_FINITE), ids=list(NON_FINITE))
@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_nan_and_infinity_refused_at_every_edge(ctx: Ctx, edge: Edge, case: str) -> None:
    _refused(ctx, edge, NON_FINITE[case])


@pytest.mark.parametrize("case", list(DEPTH), ids=list(DEPTH))
@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_depth_cap_refused_at_every_edge(ctx: Ctx, edge: Edge, case: str) -> None:
    refusal = _refused(ctx, edge, DEPTH[case])
    assert "deeper than 64" in refusal.detail, refusal


@pytest.mark.parametrize("case", list(INTEGERS), ids=list(INTEGERS))
@pytest.mark.parametrize("edge", EDGES, ids=EDGE_IDS)
def test_strict_integer_cap_refused_at_every_edge(ctx: Ctx, edge: Edge, case: str) -> None:
    refusal = _refused(ctx, edge, INTEGERS[case])
    assert "int64" in refusal.detail, refusal


# -- no silent coercion ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout", '"120"'),  # a number is not a string
        ("timeout", "120.0"),  # an integer is not a float
        ("timeout", "true"),  # true is not 1
        ("secure", "1"),
        ("secure", '"true"'),
        ("allow_internet_access", '"false"'),
        ("templateID", "1"),
        ("metadata", '{"strict": 1}'),
        ("envVars", '{"A": true}'),
        ("network", '{"allowPublicTraffic": "yes"}'),
    ],
)
def test_strict_no_coercion_in_control_plane_bodies(ctx: Ctx, field: str, value: str) -> None:
    marker = secrets.token_hex(6)
    body = {"templateID": "base", "timeout": 120, "metadata": {"strict": marker}}
    text = json.dumps({k: v for k, v in body.items() if k != field})[:-1]
    response = ctx.http.post(
        f"{ctx.server.url}/v2/sandboxes",
        content=f'{text}, "{field}": {value}}}'.encode(),
        headers={**ctx.api, "content-type": "application/json"},
    )
    refusal = _rest(response)
    assert (refusal.status, refusal.code) == (400, "invalid_request"), refusal
    assert field in refusal.detail or field.split("_")[0] in refusal.detail, refusal
    assert not _created(ctx, marker), "a sandbox was created from a coerced body"


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("filesystem.Filesystem/ListDir", {"path": "/tmp", "depth": "one"}, "depth"),
        ("filesystem.Filesystem/ListDir", {"path": "/tmp", "depth": 1.5}, "depth"),
        ("filesystem.Filesystem/ListDir", {"path": "/tmp", "depth": True}, "depth"),
        ("filesystem.Filesystem/ListDir", {"path": "/tmp", "depth": -1}, "depth"),
        ("filesystem.Filesystem/CreateWatcher", {"path": "/tmp", "recursive": "yes"}, "recursive"),
        ("filesystem.Filesystem/CreateWatcher", {"path": "/tmp", "recursive": 1}, "recursive"),
        (
            "filesystem.Filesystem/CreateWatcher",
            {"path": "/tmp", "includeEntry": True, "include_entry": False},
            "includeEntry",
        ),
        ("filesystem.Filesystem/Stat", {"path": 5}, "path"),
        ("process.Process/SendSignal", {"process": {"pid": "x"}, "signal": 9}, "pid"),
        ("process.Process/SendSignal", {"process": {"pid": 1.0}, "signal": 9}, "pid"),
        ("process.Process/SendSignal", {"process": {"pid": True}, "signal": 9}, "pid"),
        ("process.Process/SendSignal", {"process": {"pid": 1, "tag": "t"}, "signal": 9}, "tag"),
        ("process.Process/SendSignal", {"process": {"tag": 5}, "signal": 9}, "tag"),
        ("process.Process/SendSignal", {"process": {"tag": "t"}, "signal": "9"}, "signal"),
        ("process.Process/SendSignal", {"process": {"tag": "t"}, "signal": True}, "signal"),
        (
            "process.Process/Update",
            {"process": {"tag": "t"}, "pty": {"size": {"cols": "80px", "rows": 24}}},
            "cols",
        ),
        (
            "process.Process/Update",
            {"process": {"tag": "t"}, "pty": {"size": {"cols": 0, "rows": 24}}},
            "cols",
        ),
        ("process.Process/SendInput", {"process": {"tag": "t"}, "input": {"stdin": 5}}, "stdin"),
    ],
)
def test_strict_no_coercion_in_envd_requests(
    ctx: Ctx, method: str, body: dict[str, Any], field: str
) -> None:
    response = ctx.http.post(
        f"{ctx.server.url}/{method}",
        json=body,
        headers={**envd_headers(ctx.box.id, ctx.box.token), "connect-protocol-version": "1"},
    )
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["code"] == "invalid_argument" and field in error["message"], error


@pytest.mark.parametrize(
    ("process", "extra", "field"),
    [
        ({"cmd": 5}, {}, "cmd"),
        ({"cmd": "/bin/mkdir", "args": "/tmp/strict-x"}, {}, "args"),
        ({"cmd": "/bin/mkdir", "args": [1]}, {}, "args"),
        ({"cmd": "/bin/mkdir", "envs": {"A": 1}}, {}, "envs"),
        ({"cmd": "/bin/mkdir", "cwd": 7}, {}, "cwd"),
        ({"cmd": "/bin/mkdir"}, {"stdin": "false"}, "stdin"),
        ({"cmd": "/bin/mkdir"}, {"tag": 5}, "tag"),
        ({"cmd": "/bin/mkdir"}, {"pty": {"size": {"cols": "abc", "rows": 24}}}, "cols"),
        ({"cmd": "/bin/mkdir"}, {"pty": {"size": {"cols": 80, "rows": None, "x": 1}}, "z": []}, ""),
    ],
)
def test_strict_no_coercion_in_process_start(
    ctx: Ctx, process: dict[str, Any], extra: dict[str, Any], field: str
) -> None:
    """A mistyped field of Process/Start is refused before anything runs (mkdir never does)."""
    marker = secrets.token_hex(6)
    process = {"args": [f"/tmp/strict-{marker}"], **process}
    message = json.dumps({"process": process, "stdin": False, **extra}).encode()
    answer = _stream_call(ctx, ctx.box, "process.Process/Start", envelope(message))
    if not field:  # nulls mean "unset" and unknown fields are ignored (proto3 JSON)
        assert answer.code is None and answer.status == 200, answer
        wait_for(lambda: ctx.box.exists(marker), 10, "the process to run")
        return
    assert answer.status == 400 and field in answer.detail, answer
    assert not ctx.box.exists(marker), "a mistyped Start ran"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"op": "get", "key": 5}, "key"),  # 5 is not "5"
        ({"op": "get", "key": True}, "key"),
        ({"op": "get", "key": ["k"]}, "key"),
        ({"op": "list", "prefix": 0}, "prefix"),
        ({"op": 1}, "op"),
    ],
)
def test_strict_no_coercion_of_tool_arguments_from_the_sandbox(
    ctx: Ctx, arguments: dict[str, Any], field: str
) -> None:
    reply = ctx.socket_line(json.dumps({"tool": "kv", "arguments": arguments}).encode())
    assert reply["ok"] is False, reply
    assert reply["error"]["code"] == "invalid_arguments", reply
    assert f"argument '{field}'" in reply["error"]["message"], reply


def test_strict_cli_stub_types_text_by_the_schema(ctx: Ctx) -> None:
    """The shell form is text by nature: the generated command converts it by the schema
    before sending, so the gateway never has to guess."""
    marker = secrets.token_hex(6)
    assert ctx.box.run(f"kv set strict-cli-{marker} '{{\"n\": 1}}'").exit_code == 0
    assert ctx.kv_get(f"strict-cli-{marker}") == {"n": 1}
    assert ctx.box.run(f"kv set strict-cli-{marker}-n 42").exit_code == 0
    assert ctx.kv_get(f"strict-cli-{marker}-n") == 42  # untyped parameter: JSON when it is JSON
    wrong = ctx.box.run("kv frobnicate x")
    assert wrong.exit_code == 1 and "invalid_arguments" in wrong.stderr, wrong


@pytest.mark.parametrize(
    "query",
    ["limit=%2B10", "limit=010", "limit=%2010", "limit=1_0", "limit=1.0", "limit=1e1"],
)
def test_strict_no_coercion_of_query_integers(ctx: Ctx, query: str) -> None:
    response = ctx.http.get(f"{ctx.server.url}/v2/sandboxes?{query}", headers=ctx.api)
    refusal = _rest(response)
    assert (refusal.status, refusal.code) == (400, "invalid_request"), refusal
    assert "limit" in refusal.detail


# -- percent-encoding --------------------------------------------------------------------------


BAD_ESCAPES = {
    "truncated": "%2",
    "not_hex": "%zz",
    "lone_percent": "100%",
    "overlong_dot": "%c0%ae",
    "overlong_slash": "%e0%80%af",
    "surrogate": "%ed%a0%80",
    "stray_byte": "%ff",
    "beyond_unicode": "%f4%90%80%80",
}


@pytest.mark.parametrize("case", list(BAD_ESCAPES), ids=list(BAD_ESCAPES))
def test_strict_percent_encoding_refused_in_file_paths(ctx: Ctx, case: str) -> None:
    escape = BAD_ESCAPES[case]
    marker = secrets.token_hex(6)
    headers = envd_headers(ctx.box.id, ctx.box.token)
    query = f"path=/tmp/strict-{marker}{escape}"
    read = ctx.http.get(f"{ctx.server.url}/files?{query}", headers=headers)
    written = ctx.http.post(
        f"{ctx.server.url}/files?{query}",
        content=b"data",
        headers={**headers, "content-type": "application/octet-stream"},
    )
    for response in (read, written):
        refusal = _rest(response)
        assert (refusal.status, refusal.code) == (400, "invalid_url_encoding"), refusal
    assert not ctx.box.exists(marker), "an upload with a bad escape was written"


@pytest.mark.parametrize("case", list(BAD_ESCAPES), ids=list(BAD_ESCAPES))
def test_strict_percent_encoding_refused_in_api_paths_and_queries(ctx: Ctx, case: str) -> None:
    escape = BAD_ESCAPES[case]
    envd = envd_headers(ctx.box.id, ctx.box.token)
    attempts = [
        ctx.http.get(f"{ctx.server.url}/sandboxes/{ctx.box.id}{escape}", headers=ctx.api),
        ctx.http.post(
            f"{ctx.server.url}/sandboxes/{ctx.box.id}{escape}/timeout",
            json={"timeout": 5},
            headers=ctx.api,
        ),
        ctx.http.get(f"{ctx.server.url}/v2/sandboxes?metadata=strict%3D{escape}", headers=ctx.api),
        ctx.http.get(f"{ctx.server.url}/v1/audit?tool={escape}", headers=ctx.api),
        ctx.http.post(
            f"{ctx.server.url}/filesystem.Filesystem/Stat{escape}",
            json={"path": "/tmp"},
            headers={**envd, "connect-protocol-version": "1"},
        ),
    ]
    for response in attempts:
        refusal = _rest(response)
        assert (refusal.status, refusal.code) == (400, "invalid_url_encoding"), (
            response.request.url,
            refusal,
        )


def test_strict_percent_encoding_nested_metadata_query_is_strict(ctx: Ctx) -> None:
    """E2B's ``metadata`` parameter is a query string inside a parameter; its inner escapes
    are held to the same rule (``k%3D%25zz`` is ``k=%zz``)."""
    for inner in ("%25zz", "%25c0%25ae", "%25ed%25a0%2580", "%25"):
        response = ctx.http.get(
            f"{ctx.server.url}/v2/sandboxes?metadata=strict%3D{inner}", headers=ctx.api
        )
        refusal = _rest(response)
        assert (refusal.status, refusal.code) == (400, "invalid_url_encoding"), (inner, refusal)
    twice = ctx.http.get(
        f"{ctx.server.url}/v2/sandboxes?metadata=strict%3Da%26strict%3Db", headers=ctx.api
    )
    assert _rest(twice).status == 400 and "twice" in twice.text


def test_strict_repeated_query_parameter_refused_where_it_names_one_value(ctx: Ctx) -> None:
    marker = secrets.token_hex(6)
    response = ctx.http.post(
        f"{ctx.server.url}/files?path=/tmp/strict-{marker}-a&path=/tmp/strict-{marker}-b",
        content=b"data",
        headers={
            **envd_headers(ctx.box.id, ctx.box.token),
            "content-type": "application/octet-stream",
        },
    )
    refusal = _rest(response)
    assert (refusal.status, refusal.code) == (400, "invalid_request"), refusal
    assert not ctx.box.exists(marker)
    listed = ctx.http.get(
        f"{ctx.server.url}/v2/sandboxes?state=running&state=paused", headers=ctx.api
    )
    assert listed.status_code == 200, listed.text  # a list parameter may repeat


# -- ports in routing forms -------------------------------------------------------------------


BAD_PORTS = ["0", "65536", "99999", "-1", "+80", "080", "00049983", "8_0", "1e3", "9" * 5000]


@pytest.mark.parametrize("port", BAD_PORTS, ids=[p[:12] for p in BAD_PORTS])
def test_strict_port_range_refused_in_every_routing_form(ctx: Ctx, port: str) -> None:
    token = {"X-Access-Token": ctx.box.token}
    forms = {
        "host": {"Host": f"{port}-{ctx.box.id}.sandbox.localhost", **token},
        "header": {"E2b-Sandbox-Id": ctx.box.id, "E2b-Sandbox-Port": port, **token},
    }
    for form, headers in forms.items():
        for method in ("GET", "POST"):
            response = ctx.http.request(method, f"{ctx.server.url}/health", headers=headers)
            refusal = _rest(response)
            assert (refusal.status, refusal.code) == (400, "invalid_port"), (form, refusal)


def test_strict_port_range_refuses_odd_header_bytes_and_repeats(ctx: Ctx) -> None:
    """Bytes ``int()`` would misread or choke on (a superscript two, Arabic-Indic digits) and
    a routing header given twice are refused, not guessed."""
    base = [(b"E2b-Sandbox-Id", ctx.box.id.encode()), (b"X-Access-Token", ctx.box.token.encode())]
    cases = [
        [*base, (b"E2b-Sandbox-Port", b"\xb2")],
        [*base, (b"E2b-Sandbox-Port", "٤٩٩٨٣".encode())],
        [*base, (b"E2b-Sandbox-Port", b"49983"), (b"E2b-Sandbox-Port", b"8000")],
        [*base, (b"E2b-Sandbox-Port", b"49983"), (b"X-Access-Token", b"other")],
    ]
    for headers in cases:
        response = ctx.http.get(f"{ctx.server.url}/health", headers=headers)
        refusal = _rest(response)
        assert refusal.status == 400 and refusal.code in ("invalid_port", "invalid_request"), (
            headers,
            refusal,
        )
    ok = ctx.http.get(
        f"{ctx.server.url}/health",
        headers={**dict((k.decode(), v.decode()) for k, v in base), "E2b-Sandbox-Port": "49983"},
    )
    assert ok.status_code == 204, ok.text
    host = ctx.http.get(
        f"{ctx.server.url}/health",
        headers={"Host": f"49983-{ctx.box.id}.sandbox.localhost", "X-Access-Token": ctx.box.token},
    )
    assert host.status_code == 204, host.text
