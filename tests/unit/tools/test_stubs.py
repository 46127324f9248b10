"""Generated stubs compile, carry the schema, and never follow a planted symlink."""

import json
import os
import py_compile
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from sandgate.tools import Tool
from sandgate.tools.builtin import kv
from sandgate.tools.stubs import write_stubs


class _Never:
    async def run(self, arguments: dict[str, Any], context: Any) -> Any:
        raise AssertionError("stubs never execute tools")


TOOLS = [
    Tool("kv", kv.DESCRIPTION, kv.PARAMETERS, "builtin", _Never(), action="op"),
    Tool("no_params", 'Has """quotes""" and \\ backslashes.', {"type": "object"}, "exec", _Never()),
    Tool(
        "odd",
        "",
        {
            "type": "object",
            "properties": {"class": {"type": "string"}, "a-b": {}, "n": {"type": "integer"}},
            "required": ["n"],
        },
        "mcp",
        _Never(),
    ),
]


def test_stubs_compile_and_expose_only_given_tools(tmp_path: Path) -> None:
    target = tmp_path / "sandbox" / "tools"
    target.parent.mkdir()
    write_stubs(TOOLS, target, tmp_path / "staging")
    for path in (target / "python" / "sandgate_tools").glob("*.py"):
        py_compile.compile(str(path), doraise=True)
    meta = json.loads((target / "python" / "sandgate_tools" / "_tools.json").read_text())
    assert sorted(meta) == ["kv", "no_params", "odd"]
    assert sorted(p.name for p in (target / "bin").iterdir()) == ["kv", "no_params", "odd"]
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sandgate_tools as t, inspect;"
            "print(inspect.signature(t.kv.get)); print(t.odd.__call__.__doc__.strip())",
        ],
        env={"PYTHONPATH": str(target / "python")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "key: 'str | None' = None" in probe.stdout
    assert (target / "bin" / "kv").stat().st_mode & 0o755 == 0o755


def test_planted_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "host-secret-dir"
    outside.mkdir()
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "tools").symlink_to(outside)
    write_stubs(TOOLS, sandbox / "tools", tmp_path / "staging")
    assert not (sandbox / "tools").is_symlink()
    assert list(outside.iterdir()) == []


def test_stubs_are_readable_by_the_sandbox_user_whatever_the_gateways_umask(
    tmp_path: Path,
) -> None:
    """Directories 0755, files 0644, commands 0755, under a umask that would take every bit
    from group and others (the sandbox user is neither the files' owner nor in their group)."""
    target = tmp_path / "sandbox" / "tools"
    target.parent.mkdir()
    previous = os.umask(0o077)
    try:
        write_stubs(TOOLS, target, tmp_path / "staging")
    finally:
        os.umask(previous)
    modes = {
        path.relative_to(target).as_posix(): stat.S_IMODE(path.stat().st_mode)
        for path in [target, *target.rglob("*")]
    }
    for name, mode in modes.items():
        if (target / name).is_dir() or name.startswith("bin/"):
            assert mode == 0o755, name
        else:
            assert mode == 0o644, name
    assert {"bin/kv", "env.sh", "js/sandgate_tools.js", "python/sandgate_tools/_cli.py"} <= set(
        modes
    )
