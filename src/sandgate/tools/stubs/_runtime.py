"""Static parts of the generated clients (stdlib / no-dependency code run in the sandbox)."""

PY_CLIENT = '''"""Client for the Sandgate gateway socket (generated; stdlib only)."""

import json
import os
import socket
import threading

SOCKET = os.environ.get("SANDGATE_GATEWAY_SOCKET", "/run/sandgate/gateway.sock")
_local = threading.local()


class ToolError(Exception):
    """A tool call failed: ``code`` is stable (policy_denied, invalid_arguments, ...)."""

    def __init__(self, code, message, status=0):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.status = status


def _connection():
    conn = getattr(_local, "conn", None)
    if conn is None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(SOCKET)
        except OSError as exc:
            sock.close()
            message = "cannot reach the gateway at %s: %s" % (SOCKET, exc)
            raise ToolError("unavailable", message, 503)
        conn = (sock, sock.makefile("rb"))
        _local.conn = conn
    return conn


def _drop():
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        conn[1].close()
        conn[0].close()


def call(tool, arguments, idempotency_key=None):
    """Calls ``tool`` with ``arguments`` (None values are left out); returns its result."""
    request = {"tool": tool, "arguments": {k: v for k, v in arguments.items() if v is not None}}
    if idempotency_key is not None:
        request["idempotency_key"] = idempotency_key
    parent = os.environ.get("TRACEPARENT")
    if parent:
        request["traceparent"] = parent
    data = (json.dumps(request) + "\\n").encode()
    sock, reader = _connection()
    try:
        sock.sendall(data)
        line = reader.readline()
    except OSError:
        line = b""
    if not line:
        _drop()
        raise ToolError("unavailable", "the gateway closed the connection", 503)
    reply = json.loads(line)
    if reply.get("ok"):
        return reply.get("result")
    error = reply.get("error") or {}
    raise ToolError(error.get("code", "error"), error.get("message", ""), error.get("status", 0))
'''

PY_CLI = '''"""Command-line form of a tool (generated; stdlib only)."""

import json
import os
import re
import sys

from sandgate_tools._client import ToolError, call


def _meta(tool):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tools.json")
    with open(path) as handle:
        return json.load(handle)[tool]


def _usage(tool, meta):
    actions = meta.get("actions") or []
    props = meta["parameters"].get("properties", {})
    lines = ["%s: %s" % (tool, meta.get("description", "")), ""]
    head = tool + (" {%s}" % "|".join(actions) if actions else "")
    names = [n for n in props if n != meta.get("action")]
    lines.append("usage: %s %s" % (head, " ".join("[%s]" % n for n in names)))
    lines.append("       (positionals fill parameters in order; or --NAME VALUE; or --json OBJECT)")
    lines.append("")
    lines.append("parameters (JSON Schema):")
    lines.append(json.dumps(meta["parameters"], indent=2))
    return "\\n".join(lines)


def main(tool, argv=None):
    meta = _meta(tool)
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(_usage(tool, meta))
        return 0
    props = meta["parameters"].get("properties", {})
    action_param = meta.get("action")
    arguments = {}
    key = None
    positionals = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--json" and i + 1 < len(argv):
            arguments.update(json.loads(argv[i + 1]))
            i += 2
            continue
        if arg == "--idempotency-key" and i + 1 < len(argv):
            key = argv[i + 1]
            i += 2
            continue
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            if not eq:
                if i + 1 >= len(argv):
                    print("%s: --%s needs a value" % (tool, name), file=sys.stderr)
                    return 2
                value = argv[i + 1]
                i += 1
            arguments[name.replace("-", "_")] = _value(props.get(name.replace("-", "_")), value)
            i += 1
            continue
        positionals.append(arg)
        i += 1
    names = [n for n in props if n != action_param]
    if action_param and positionals:
        arguments.setdefault(action_param, positionals.pop(0))
    for name, value in zip(names, positionals):
        arguments.setdefault(name, _value(props.get(name), value))
    if len(positionals) > len(names):
        print("%s: too many arguments (see %s --help)" % (tool, tool), file=sys.stderr)
        return 2
    try:
        result = call(tool, arguments, key)
    except ToolError as exc:
        print("%s: %s: %s" % (tool, exc.code, exc.message), file=sys.stderr)
        return 1
    print(result if isinstance(result, str) else json.dumps(result, indent=2))
    return 0


_NUMBER = re.compile(r"^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?$")


def _value(schema, text):
    """Command-line text as the JSON value the parameter's schema asks for; the gateway
    never coerces, so this is where text becomes typed. Strings stay text; integers and
    numbers take JSON number syntax; booleans take true/false; objects, arrays and untyped
    parameters take JSON text. Text that fits none stays text, and the gateway's error
    names the parameter."""
    if not isinstance(schema, dict):
        return text
    kinds = schema.get("type")
    types = set(kinds) if isinstance(kinds, list) else {kinds}
    if "string" in types:
        return text
    if types & {"integer", "number"} and _NUMBER.fullmatch(text):
        return json.loads(text)
    if "boolean" in types and text in ("true", "false"):
        return text == "true"
    if "null" in types and text == "null":
        return None
    if types & {"object", "array"} or kinds is None:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
'''

BIN = """#!/usr/bin/env python3
import os
import sys

_here = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_here), "python"))
from sandgate_tools._cli import main

sys.exit(main(%r))
"""

JS_CLIENT = r"""'use strict';
// Sandgate tools available in this sandbox (generated; no dependencies).
const net = require('net');

const SOCKET = process.env.SANDGATE_GATEWAY_SOCKET || '/run/sandgate/gateway.sock';

class ToolError extends Error {
  constructor(code, message, status) {
    super(code + ': ' + message);
    this.code = code;
    this.status = status || 0;
  }
}

function call(tool, args, idempotencyKey) {
  const clean = {};
  for (const [k, v] of Object.entries(args || {})) if (v !== undefined && v !== null) clean[k] = v;
  const request = { tool, arguments: clean };
  if (idempotencyKey !== undefined) request.idempotency_key = idempotencyKey;
  if (process.env.TRACEPARENT) request.traceparent = process.env.TRACEPARENT;
  return new Promise((resolve, reject) => {
    const sock = net.createConnection(SOCKET);
    let buffer = '';
    let done = false;
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.write(JSON.stringify(request) + '\n'));
    sock.on('data', (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf('\n');
      if (end < 0 || done) return;
      done = true;
      sock.end();
      const reply = JSON.parse(buffer.slice(0, end));
      if (reply.ok) resolve(reply.result);
      else {
        const e = reply.error || {};
        reject(new ToolError(e.code || 'error', e.message || '', e.status));
      }
    });
    const fail = (message) => {
      if (!done) { done = true; reject(new ToolError('unavailable', message, 503)); }
    };
    sock.on('error', (err) => fail(err.message));
    sock.on('end', () => fail('the gateway closed the connection'));
  });
}
"""

ENV_SH = """# Sourced by bash through BASH_ENV (generated): keeps the tool commands on PATH after
# /etc/profile resets it in login shells.
case ":$PATH:" in
  *:/run/sandgate/tools/bin:*) ;;
  *) PATH="/run/sandgate/tools/bin:$PATH"; export PATH ;;
esac
"""
