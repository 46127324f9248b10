"""Sandgate's OCI runtime shim: which calls it touches and how it rewrites a bundle."""

from __future__ import annotations

import ast
import json
import os
import socket
import stat
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandgate
from sandgate.runtimes import oci_shim
from sandgate.runtimes.oci_shim import bind_listener, patch_config, report, subcommand
from sandgate.runtimes.oci_shim import main as shim_main

SHIM_CALL = [
    "--root", "/var/run/docker/runtime-runc/moby",
    "--log", "/run/x/log.json",
    "--log-format", "json",
    "create", "--bundle", "/run/x", "--pid-file", "/run/x/init.pid", "abc",
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (SHIM_CALL, (6, "create")),
        (["--root", "create", "start", "abc"], (2, "start")),  # a flag's value is not it
        (["--log-format=json", "delete", "--force", "abc"], (1, "delete")),
        (["--systemd-cgroup", "state", "abc"], (1, "state")),
        (["--version"], None),
    ],
)
def test_subcommand_skips_global_flags_and_their_values(
    args: list[str], expected: tuple[int, str] | None
) -> None:
    assert subcommand(args) == expected


def _config() -> dict[str, Any]:
    return {
        "process": {
            "args": ["python3"],
            "rlimits": [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 1024}],
        },
        "root": {"path": "/var/lib/docker/overlay2/x/merged", "readonly": True},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/run/sandgate", "source": "/run/sandgate-rt/stage/s/run",
             "options": ["rbind", "ro", "rprivate"]},
            {"destination": "/dev/pts", "source": "/run/sandgate-rt/stage/s/pts",
             "options": ["rbind", "rprivate"]},
            {"destination": "/etc/hosts", "source": "/var/lib/docker/containers/x/hosts"},
            {"destination": "/etc/resolv.conf", "source": "/var/lib/docker/containers/x/r"},
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "user"}, {"type": "network"}],
            "sysctl": {"net.ipv4.ping_group_range": "0 2147483647", "net.ipv4.x": "1"},
        },
    }  # fmt: skip


def test_patch_config_joins_the_sandbox_namespace_over_the_staged_root() -> None:
    info = {"uid_base": 1_000_065_536, "uid_count": 65536, "root": "/run/sandgate-rt/stage/s/root"}
    patched = patch_config(_config(), info=info, userns_path="/proc/42/ns/user")
    assert patched["root"] == {"path": "/run/sandgate-rt/stage/s/root", "readonly": False}
    users = [n for n in patched["linux"]["namespaces"] if n["type"] == "user"]
    assert users == [{"type": "user", "path": "/proc/42/ns/user"}]
    mapping = [{"containerID": 0, "hostID": 1_000_065_536, "size": 65536}]
    assert patched["linux"]["uidMappings"] == patched["linux"]["gidMappings"] == mapping
    assert patched["linux"]["sysctl"] == {"net.ipv4.x": "1"}
    targets = {m["destination"]: m for m in patched["mounts"]}
    assert "/etc/hosts" not in targets and "/etc/resolv.conf" not in targets
    assert {"ro", "nosuid", "nodev"} <= set(targets["/run/sandgate"]["options"])
    assert {"nosuid", "noexec"} <= set(targets["/dev/pts"]["options"])
    # rlimits leave the bundle: the shim applies them to itself (runc would need
    # CAP_SYS_RESOURCE to set them on a process already in the namespace).
    assert "rlimits" not in patched["process"]
    assert patched["process"]["args"] == ["python3"]


def test_patch_config_keeps_a_volumes_locked_flags_and_no_other_mounts() -> None:
    config = _config()
    config["mounts"] += [
        {"destination": "/mnt/data", "source": "/run/sandgate-rt/stage/s/volumes/0",
         "options": ["rbind", "rprivate"]},
        {"destination": "/elsewhere", "source": "/srv/volumes/0", "options": ["rbind"]},
    ]  # fmt: skip
    info = {"uid_base": 1_000_065_536, "uid_count": 65536, "root": "/run/sandgate-rt/stage/s/root"}
    targets = {
        m["destination"]: m for m in patch_config(config, info=info, userns_path="/u")["mounts"]
    }
    assert targets["/mnt/data"]["options"] == ["rbind", "rprivate", "nosuid", "nodev"]
    # Only the sandbox's own stage counts as a volume (a look-alike path elsewhere does not).
    assert targets["/elsewhere"]["options"] == ["rbind"]


@pytest.fixture
def no_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


@pytest.mark.usefixtures("no_umask")
def test_bind_listener_makes_a_root_only_socket_without_touching_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The umask is the whole process's: the gateway binds from worker threads while others
    # create the files a sandbox reads, and a umask narrowed for one bind left a sandbox whose
    # guest could not read its own code.
    def refuse(mask: int) -> int:
        raise AssertionError(f"os.umask({mask:#o}) called")

    monkeypatch.setattr(os, "umask", refuse)
    path = tmp_path / "guest.sock"
    fd = bind_listener(str(path))
    with socket.socket(fileno=fd) as listener:
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert path.stat().st_mode & 0o777 == 0o600
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))  # and it listens
        assert listener.getsockname() == str(path)


def test_no_gateway_module_changes_the_process_umask() -> None:
    # Same class, wider: the gateway is one multi-threaded process. Only the guest (its own
    # process in the sandbox) may set its umask.
    package = Path(sandgate.__file__).parent
    callers = []
    for module in sorted(package.rglob("*.py")):
        if module.is_relative_to(package / "guest"):
            continue
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "umask"
            ):
                callers.append(f"{module.relative_to(package)}:{node.lineno}")
    assert callers == []


def _call_with_log(log: Path, log_format: str) -> list[str]:
    return ["--root", "/run/x", "--log", str(log), "--log-format", log_format,
            "create", "--bundle", "/run/x", "abc"]  # fmt: skip


def test_a_refusal_is_written_where_the_engine_reads_runcs_errors(tmp_path: Path) -> None:
    """containerd shows the last error of runc's ``--log`` file; without a line there it says
    only "unable to retrieve OCI runtime error"."""
    log = tmp_path / "log.json"
    report(_call_with_log(log, "json"), "sandgate runtime: no")
    assert json.loads(log.read_text()) == {"level": "error", "msg": "sandgate runtime: no"}
    text = tmp_path / "log.txt"
    report(_call_with_log(text, "text"), 'say "no"')
    assert text.read_text() == 'level=error msg="say \\"no\\""\n'
    report(["create", "--bundle", "/run/x", "abc"], "no log given: stderr only")  # no raise


def test_a_container_that_is_no_sandbox_is_refused_in_runcs_log(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"mounts": [], "process": {}}))
    log = tmp_path / "log.json"
    args = ["--log", str(log), "--log-format", "json", "create", "--bundle", str(bundle), "c"]
    with pytest.raises(SystemExit) as exited:
        shim_main(["--runc", "/bin/false", "--", *args])
    assert exited.value.code == 1
    assert "is not a Sandgate sandbox" in json.loads(log.read_text())["msg"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def test_the_shims_json_is_cpythons_accelerator_not_the_json_module() -> None:
    """On CPython the probe of ``_json`` passes and the fallback (``json``'s import, the cost
    this avoids) is not taken."""
    assert oci_shim.loads is not json.loads
    assert oci_shim.dumps is not json.dumps


@pytest.mark.parametrize("broken", ["missing", "different"])
def test_the_shim_falls_back_to_json_when_the_accelerator_is_not_as_expected(
    broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_json`` is private: an interpreter without it, or whose calls behave otherwise, gets
    ``json`` itself, found out at the shim's start, not in the middle of a create."""
    import _json

    fake = types.ModuleType("_json")
    if broken == "different":
        fake.encode_basestring_ascii = _json.encode_basestring_ascii  # type: ignore[attr-defined]
        fake.make_scanner = _json.make_scanner  # type: ignore[attr-defined]
        fake.make_encoder = lambda *args: lambda value, level: ["{}"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_json", fake)
    loads, dumps = oci_shim._json_codec()
    assert (loads, dumps) == (json.loads, json.dumps)


@given(JSON_VALUES)
def test_the_shims_json_reads_and_writes_what_the_json_module_does(value: Any) -> None:
    """The shim rewrites the engine's ``config.json`` with ``_json`` alone (``json``'s import
    costs every Docker create ~6 ms): byte for byte what ``json.dumps`` writes, and it reads
    back what ``json.loads`` reads."""
    text = oci_shim.dumps(value)
    assert text == json.dumps(value)
    assert oci_shim.loads(f" \n{text}\t".encode()) == json.loads(text)


@pytest.mark.parametrize("document", [b"", b"{", b'{"a": 1} x', b"[1,]", b"\xff"])
def test_the_shims_json_refuses_what_the_json_module_refuses(document: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(document)
    with pytest.raises(ValueError):
        oci_shim.loads(document)


def test_the_shim_starts_without_json_re_or_typing() -> None:
    """Start-up is part of every Docker create: the shim, as the engine runs it, imports
    none of the stdlib's costly modules."""
    path = str(Path(oci_shim.__file__))
    probe = (
        f"import sys; exec(compile(open({path!r}).read(), {path!r}, 'exec'), "
        "{'__name__': 'oci_shim'}); "
        "print(sorted({'json', 're', 'enum', 'typing'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
