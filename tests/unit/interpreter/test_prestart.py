"""The default kernel's head start (``_prestart``) and its launcher (``_launch.py``), with real
processes. The host has no ipykernel: the launcher runs over small stand-in packages, and the
prestart launches a probe script in the launcher's place; that jupyter_client adopts the
prestarted kernel in a real sandbox is asserted by the compat suite (``lean_start``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sandgate.interpreter import _prestart
from sandgate.interpreter._prestart import kernel_env, lean_launcher, prestart

PLAIN_SPEC = {
    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "metadata": {"debugger": True},
}

# Stands in for _launch.py: reports how it was started through a FIFO, then waits.
PROBE = """
import json, os, signal, sys
report = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "sid": os.getsid(0)}
with open(os.environ["PRESTART_PROBE"], "w") as fifo:
    json.dump(report, fifo)
signal.pause()
"""


@pytest.fixture
def sandbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home, a Jupyter path holding a ``python3`` spec, and a state path, all in tmp."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_DATA_HOME", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("SANDGATE_INTERPRETER_STATE", str(tmp_path / "state.json"))
    monkeypatch.setattr(_prestart, "DEFAULT_CWD", str(home / "user"))
    _write_spec(tmp_path, PLAIN_SPEC)
    return home


def _write_spec(tmp_path: Path, spec: dict[str, object]) -> None:
    directory = tmp_path / "jupyter" / "kernels" / "python3"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernel.json").write_text(json.dumps(spec))


@pytest.fixture
def probe_fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """``PROBE`` in the launcher's place, and the FIFO it reports through."""
    probe, fifo = tmp_path / "probe.py", tmp_path / "probe.fifo"
    probe.write_text(PROBE)
    os.mkfifo(fifo)
    monkeypatch.setattr(_prestart, "LAUNCHER", str(probe))
    monkeypatch.setenv("PRESTART_PROBE", str(fifo))
    return probe, fifo


def test_the_plain_spec_is_started_as_jupyter_client_would_start_it(
    sandbox_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    probe_fifo: tuple[Path, Path],
) -> None:  # fmt: skip
    probe, fifo = probe_fifo
    monkeypatch.setenv("PYTHONEXECUTABLE", "/nowhere/python")
    monkeypatch.setenv("SANDGATE_INTERPRETER_PORT", "49999")

    prestarted = prestart()
    assert prestarted is not None
    try:
        with open(fifo) as f:  # blocks until the probe reports: no polling
            report = json.load(f)
        connection = Path(prestarted.connection_file)
        assert report["argv"] == [str(probe), "-f", str(connection)]
        assert report["cwd"] == str(sandbox_home / "user")
        assert report["sid"] == prestarted.process.pid  # its own session, for interrupts
        env = report["env"]
        assert env["JPY_PARENT_PID"] == str(os.getpid())  # it quits when the server dies
        assert "PYTHONEXECUTABLE" not in env and "SANDGATE_INTERPRETER_PORT" not in env
        assert env["PYDEVD_DISABLE_FILE_VALIDATION"] == "1"
        assert prestarted.env == kernel_env() and prestarted.cwd == report["cwd"]
        assert prestarted.spec_argv == PLAIN_SPEC["argv"]
        assert prestarted.resource_dir == str(tmp_path / "jupyter" / "kernels" / "python3")

        assert stat.S_IMODE(connection.stat().st_mode) == 0o600  # it holds the key
        info = json.loads(connection.read_text())
        assert info == prestarted.info
        ports = [info[name] for name in ("shell_port", "iopub_port", "stdin_port",
                                         "control_port", "hb_port")]  # fmt: skip
        assert len(set(ports)) == 5 and all(isinstance(p, int) and p > 0 for p in ports)
        assert (info["ip"], info["transport"], info["kernel_name"]) == (
            "127.0.0.1", "tcp", "python3",
        )  # fmt: skip
        assert len(info["key"]) == 32
        assert not list(connection.parent.glob("*.tmp"))
    finally:
        prestarted.discard()
    assert prestarted.process.returncode is not None  # stopped and reaped
    assert not Path(prestarted.connection_file).exists()
    prestarted.discard()  # idempotent


def test_a_taken_kernel_is_not_stopped_by_discard(
    sandbox_home: Path, probe_fifo: tuple[Path, Path]
) -> None:
    _, fifo = probe_fifo
    prestarted = prestart()
    assert prestarted is not None
    with open(fifo) as f:
        json.load(f)
    process = prestarted.take()
    try:
        prestarted.discard()
        assert process.poll() is None  # still the taker's
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    "spec",
    [
        {**PLAIN_SPEC, "env": {"A": "1"}},
        {**PLAIN_SPEC, "argv": ["python3", "-m", "other_kernel", "-f", "{connection_file}"]},
        {**PLAIN_SPEC, "metadata": {"kernel_provisioner": {"provisioner_name": "x"}}},
        {**PLAIN_SPEC, "interrupt_mode": "message"},
    ],
    ids=["env", "argv", "provisioner", "interrupt-message"],
)
def test_only_ipykernels_plain_spec_gets_a_head_start(
    sandbox_home: Path, tmp_path: Path, spec: dict[str, object]
) -> None:
    _write_spec(tmp_path, spec)
    assert prestart() is None


def test_a_restarted_server_gets_no_head_start(sandbox_home: Path, tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{}")  # a previous server's state: it restores
    assert prestart() is None


def test_a_failing_head_start_is_no_start(
    sandbox_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(_prestart, "DEFAULT_CWD", str(tmp_path / "a-file" / "user"))
    assert prestart() is None
    assert "no prestarted kernel" in capsys.readouterr().err


def test_lean_launcher_replaces_only_ipykernels_launcher() -> None:
    argv = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert lean_launcher(argv) == ["/usr/bin/python3", _prestart.LAUNCHER, "-f",
                                   "{connection_file}"]  # fmt: skip
    deno = ["deno", "jupyter", "--kernel", "--conn", "{connection_file}"]
    assert lean_launcher(deno) == deno


# Stand-ins for ipykernel, IPython, jedi and debugpy: what _launch.py sees while the
# kernel application loads, and what user code sees after.
FAKES = {
    "jedi.py": "OK = 'jedi'\n",
    "debugpy.py": "OK = 'debugpy'\n",
    "IPython/__init__.py": "from .terminal.embed import embed\n",
    "IPython/terminal/__init__.py": "",
    "IPython/terminal/embed.py": "REAL = True\ndef embed(**kwargs):\n    return 'the real embed'\n",
    "ipykernel/__init__.py": "",
    "ipykernel/kernelapp.py": """
import sys
seen = {}
for name in ("debugpy", "jedi"):
    try:
        __import__(name)
        seen[name] = "imported"
    except ImportError:
        seen[name] = "refused"
import IPython
seen["terminal_loaded_by_ipython"] = "REAL" in vars(sys.modules["IPython.terminal.embed"])

def launch_new_instance():
    import json
    import IPython
    out = dict(seen, path0=sys.path[0])
    out["none_left"] = [n for n in ("debugpy", "jedi") if n in sys.modules]
    out["embed"] = IPython.embed()
    import jedi, debugpy
    out["after"] = [jedi.OK, debugpy.OK]
    import IPython.terminal.embed as real
    out["real"] = real.REAL
    print(json.dumps(out))
""",
}


def test_the_launcher_refuses_three_imports_only_while_the_kernel_loads(tmp_path: Path) -> None:
    for name, text in FAKES.items():
        path = tmp_path / "site" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = subprocess.run(
        [sys.executable, _prestart.LAUNCHER, "-f", "unused.json"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["debugpy"] == out["jedi"] == "refused"
    assert out["terminal_loaded_by_ipython"] is False  # IPython got the stand-in
    assert out["none_left"] == []  # the refusals are lifted
    assert out["embed"] == "the real embed"  # IPython.embed loads the real module
    assert out["after"] == ["jedi", "debugpy"] and out["real"] is True
    assert out["path0"] != str(Path(_prestart.LAUNCHER).parent)
