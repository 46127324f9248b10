"""Isolation seen from inside a sandbox, on every runtime (security.md ESC-02, ESC-05, ESC-07,
ESC-08, ESC-16). Each test runs once per ``runtime`` (docker, bwrap)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.runtimes import RuntimeView
from tests.fixtures.server import RunningServer
from tests.framework.envd import CommandResult, run
from tests.framework.posture import GUEST_MASK, proc_status

PROBE = (Path(__file__).parent / "probe.py").read_text()


def _run(server: RunningServer, sandbox: dict[str, Any], command: str, **kw: Any) -> CommandResult:
    return run(server.url, sandbox["sandboxID"], sandbox["envdAccessToken"], command, **kw)


def test_ESC_02_inside_posture_of_user_commands(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    result = _run(
        runtime_server,
        runtime_sandbox,
        "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; id -u; "
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.split()
    fields = dict(zip(lines[0:10:2], lines[1:10:2], strict=True))
    assert int(fields["CapEff:"], 16) == 0
    assert int(fields["CapPrm:"], 16) == 0
    assert int(fields["CapBnd:"], 16) == GUEST_MASK
    assert fields["NoNewPrivs:"] == "1"
    assert fields["Seccomp:"] == "2"
    assert lines[10] == "1000"
    assert lines[11:] == ["lo"], "the only network interface is loopback"


def test_ESC_02_commands_spawned_without_a_fork_keep_the_posture(
    runtime_view: RuntimeView, runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    """The guest starts commands with ``posix_spawn`` under the user's ids, having cleared
    its ambient capabilities at start (``guest._spawn``; bubblewrap raises them): a user's
    command has the user's ids in every slot and no capability, the guest keeps its own
    ids, capabilities and OOM score, and its ambient set is empty."""
    guest = runtime_view.init_pid(runtime_sandbox["sandboxID"])
    assert int(proc_status(guest)["CapAmb"], 16) == 0
    result = _run(
        runtime_server,
        runtime_sandbox,
        "grep -E '^(Uid|Gid|CapPrm|CapEff|CapAmb):' /proc/self/status; "
        "cat /proc/self/oom_score_adj",
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    fields = {line.split(":")[0]: line.split(":")[1].split() for line in lines[:5]}
    assert fields["Uid"] == ["1000"] * 4
    assert fields["Gid"] == ["1000"] * 4
    for caps in ("CapPrm", "CapEff", "CapAmb"):
        assert int(fields[caps][0], 16) == 0, caps
    assert lines[5] == "1000"

    status = proc_status(guest)
    assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == GUEST_MASK
    assert len(set(status["Uid"].split())) == 1  # real, effective, saved and fs: one uid
    assert len(set(status["Gid"].split())) == 1
    assert Path(f"/proc/{guest}/oom_score_adj").read_text().strip() == "500"


def test_ESC_02_root_commands_stay_bounded(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    result = _run(
        runtime_server,
        runtime_sandbox,
        "id -u; grep CapBnd /proc/self/status; touch /usr/evil 2>&1; "
        "mount -t tmpfs x /mnt 2>&1; echo done",
        user="root",
    )
    assert result.stdout.splitlines()[0] == "0"
    assert int(result.stdout.splitlines()[1].split()[1], 16) == GUEST_MASK
    # Root may write its own layer (a full machine inside) but mounts nothing, and what it
    # writes never reaches the host.
    assert "touch" not in result.stdout
    assert "permission denied" in result.stdout.lower() or "not permitted" in result.stdout
    assert subprocess.run(["test", "-e", "/usr/evil"]).returncode != 0


@pytest.mark.parametrize("user", ["user", "root"])
def test_ESC_05_no_nested_user_namespaces(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any], user: str
) -> None:
    result = _run(
        runtime_server,
        runtime_sandbox,
        "unshare -Urm sh -c 'mount -t tmpfs t /mnt && echo PWNED' 2>&1; echo rc=$?",
        user=user,
    )
    assert "PWNED" not in result.stdout
    assert "rc=1" in result.stdout
    assert "Operation not permitted" in result.stdout or "No space left" in result.stdout


def test_ESC_07_ESC_08_syscall_probe_matrix(
    runtime: str, runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    result = _run(runtime_server, runtime_sandbox, f"python3 - <<'PROBE'\n{PROBE}\nPROBE")
    assert result.exit_code == 0, result.stderr
    answers: dict[str, str] = json.loads(result.stdout)
    assert len(answers) >= 36, answers
    let_through = {
        name
        for name, answer in answers.items()
        if name != "x32_getpid" and answer not in ("EPERM", "ENOSYS", "EACCES")
    }
    if not answers["x32_getpid"].startswith("signal"):
        let_through.add("x32_getpid")
    assert let_through == set(), {name: answers[name] for name in let_through}


def test_ESC_16_tiocsti_injection_fails(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    script = (
        "import fcntl, termios\n"
        "for path in ('/dev/tty', None):\n"
        "    try:\n"
        "        fd = open(path, 'wb') if path else open(0)\n"
        "        fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n"
        "        print('INJECTED', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc.errno)\n"
    )
    result = _run(runtime_server, runtime_sandbox, f"python3 - <<'EOF'\n{script}\nEOF")
    assert "INJECTED" not in result.stdout
    assert result.stdout.count("refused") == 2, result.stdout
