"""Writing the generated clients for one sandbox.

SECURITY: the target directory lives in the sandbox's mount, which code in the sandbox may
have written to (a planted symlink at ``tools`` or below). So the stubs are built in a fresh
directory outside the mount and moved into place with one ``rename``, which never follows a
symlink and fails if anything already sits at the target; an old ``tools`` (ours, from before
a gateway restart) is removed without following links first.
"""

from __future__ import annotations

import json
import keyword
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sandgate._atomic import write_all
from sandgate.tools.stubs._runtime import BIN, ENV_SH, JS_CLIENT, PY_CLI, PY_CLIENT
from sandgate.tools.tool import Tool

_PY_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list[Any]",
    "object": "dict[str, Any]",
}
_TS_TYPES = {
    "string": "string",
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "array": "unknown[]",
    "object": "Record<string, unknown>",
}


def write_stubs(tools: list[Tool], target: Path, staging_root: Path) -> None:
    """Replaces ``target`` with freshly generated stubs for ``tools`` (world-readable)."""
    staging_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix="stubs-", dir=staging_root))
    try:
        _generate(tools, staging)
        _remove(target)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


#: The stub tree's directories, made before any file (parents first).
_DIRS = ("python", "python/sandgate_tools", "bin", "js")


def _generate(tools: list[Tool], root: Path) -> None:
    # SECURITY: world-readable on purpose: the sandbox user (uid 1000) must read its stubs;
    # they hold no secret, only the schemas of tools this sandbox may call.
    # Every create writes this tree while its guest starts, so it takes few system calls:
    # each directory made once, each file opened, written and closed once (``O_EXCL``, into
    # the fresh staging directory), its mode set on the open descriptor.
    os.chmod(root, 0o755)  # noqa: S103
    for directory in _DIRS:
        path = root / directory
        os.mkdir(path)
        os.chmod(path, 0o755)  # noqa: S103  (mkdir's mode passes through the umask)
    meta = {tool.name: tool.describe() for tool in tools}
    files: list[tuple[str, str, int]] = [
        ("python/sandgate_tools/_client.py", PY_CLIENT, 0o644),
        ("python/sandgate_tools/_cli.py", PY_CLI, 0o644),
        ("python/sandgate_tools/_tools.json", json.dumps(meta, indent=1), 0o644),
        ("python/sandgate_tools/__init__.py", _python_module(tools), 0o644),
        *((f"bin/{tool.name}", BIN % tool.name, 0o755) for tool in tools),
        ("env.sh", ENV_SH, 0o644),
        ("js/sandgate_tools.js", _js_module(tools), 0o644),
        ("js/sandgate_tools.d.ts", _ts_declarations(tools), 0o644),
    ]
    for name, text, mode in files:
        _write(root / name, text, mode)


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits off ``mode``
        write_all(fd, text.encode())
    finally:
        os.close(fd)


def _params(tool: Tool) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, schema, required) of the parameters a stub exposes by name."""
    props: dict[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    return [
        (name, schema if isinstance(schema, dict) else {}, name in required)
        for name, schema in props.items()
        if name != tool.action and name.isidentifier() and not keyword.iskeyword(name)
    ]


def _py_type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    return _PY_TYPES.get(kind, "Any") if isinstance(kind, str) else "Any"


def _doc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _py_function(tool: Tool, name: str, action: str | None) -> str:
    params = _params(tool)
    required = [p for p in params if p[2]]
    optional = [p for p in params if not p[2]]
    signature = ["self", "*"]
    signature += [f"{n}: {_py_type(s)}" for n, s, _ in required]
    signature += [f"{n}: {_py_type(s)} | None = None" for n, s, _ in optional]
    signature += ["idempotency_key: str | None = None", "**extra: Any"]
    doc_lines = [_doc(tool.description or tool.name)]
    if action is not None:
        doc_lines[0] = f"{tool.name} {action}: {doc_lines[0]}"
    for n, s, req in params:
        detail = _doc(str(s.get("description", "")))
        doc_lines.append(f"    {n} ({s.get('type', 'any')}{', required' if req else ''}): {detail}")
    entries = [f"{n!r}: {n}" for n, _, _ in params]
    if action is not None:
        entries.insert(0, f"{tool.action!r}: {action!r}")
    args = ", ".join([*entries, "**extra"])
    doc = "\n".join(doc_lines)
    return (
        f"    def {name}({', '.join(signature)}) -> Any:\n"
        f'        """{doc}\n        """\n'
        f"        return call({tool.name!r}, {{{args}}}, idempotency_key)\n"
    )


def _python_module(tools: list[Tool]) -> str:
    parts = [
        '"""Sandgate tools available in this sandbox (generated; do not edit).\n\n'
        "Every call goes through the gateway's policy and audit; failures raise ToolError.\n"
        '"""\n\nfrom __future__ import annotations\n\nfrom typing import Any\n\n'
        "from sandgate_tools._client import ToolError, call\n\n"
        f"__all__ = {['ToolError', 'call', *[t.name for t in tools]]!r}\n"
    ]
    for tool in tools:
        cls = "_" + "".join(p.capitalize() for p in tool.name.split("_"))
        body = [f"\n\nclass {cls}:\n", f'    """{_doc(tool.description or tool.name)}"""\n\n']
        if tool.actions:
            body += [_py_function(tool, a, a) + "\n" for a in tool.actions if a.isidentifier()]
        body.append(_py_function(tool, "__call__", None))
        body.append(f"\n\n{tool.name} = {cls}()\n")
        parts.append("".join(body))
    return "".join(parts)


def _js_module(tools: list[Tool]) -> str:
    lines = [JS_CLIENT, "", "module.exports = { ToolError, call };"]
    for tool in tools:
        name = json.dumps(tool.name)
        lines.append(
            f"module.exports[{name}] = (args, opts) => "
            f"call({name}, args, (opts || {{}}).idempotencyKey);"
        )
        for action in tool.actions:
            lines.append(
                f"module.exports[{name}][{json.dumps(action)}] = (args, opts) => "
                f"call({name}, Object.assign({{}}, args, {{{json.dumps(tool.action)}: "
                f"{json.dumps(action)}}}), (opts || {{}}).idempotencyKey);"
            )
    return "\n".join(lines) + "\n"


def _ts_declarations(tools: list[Tool]) -> str:
    lines = [
        "// Sandgate tools available in this sandbox (generated).",
        "export declare class ToolError extends Error { code: string; status: number; }",
        "export interface CallOptions { idempotencyKey?: string }",
        "export declare function call(tool: string, args?: object, key?: string): "
        "Promise<unknown>;",
    ]
    for tool in tools:
        iface = "".join(p.capitalize() for p in tool.name.split("_")) + "Args"
        fields = []
        for n, s, req in _params(tool):
            kind = s.get("type")
            ts = _TS_TYPES.get(kind, "unknown") if isinstance(kind, str) else "unknown"
            fields.append(f"  /** {s.get('description', '')!s} */ {n}{'' if req else '?'}: {ts};")
        lines += [f"export interface {iface} {{", *fields, "}"]
        desc = (tool.description or tool.name).replace("*/", "* /")
        methods = "".join(
            f"  {a}(args?: {iface}, opts?: CallOptions): Promise<unknown>;\n" for a in tool.actions
        )
        lines.append(
            f"/** {desc} */\nexport declare const {tool.name}: {{\n"
            f"  (args?: {iface}, opts?: CallOptions): Promise<unknown>;\n{methods}}};"
        )
    return "\n".join(lines) + "\n"
