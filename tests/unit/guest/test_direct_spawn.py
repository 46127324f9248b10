"""Commands started without a Python child (``guest._spawn``) against forked ones.

The daemon starts a non-PTY command with ``posix_spawn`` under the user's ids (having cleared
its ambient capabilities at start), and a PTY command (which needs its controlling terminal
set in the child) still from a forked child. Started as a user, both must give the process the
same ids, groups, capabilities, signal dispositions, session, OOM score and working
directory, fail with the same errors, and leave the daemon exactly as it was. The daemon runs
under ``capsh`` with an ambient capability raised, as bubblewrap starts the sandbox's guest.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandgate.guest.client import GuestError

from .conftest import RunningGuest
from .helpers import collect, run

pytestmark = pytest.mark.timeout(60)

StartGuest = Callable[..., RunningGuest]
#: As bubblewrap's ``--cap-add``: the capability in the inheritable and the ambient set.
_AMBIENT = ("capsh", "--inh=cap_chown", "--addamb=cap_chown", "--", "-c", 'exec "$@"', "capsh")
_STATUS_FIELDS = (
    "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs", "SigIgn",
    "SigBlk",
)  # fmt: skip
#: What the process says of itself: OOM score, whether it leads its session, its directory.
_SELF = 'echo "$(cat /proc/$$/oom_score_adj) $(($(cut -d" " -f6 /proc/$$/stat) == $$))"; pwd'


def _fields(text: str) -> dict[str, str]:
    found = {}
    for line in text.replace("\r", "").splitlines():
        key, _, value = line.partition(":")
        if key in _STATUS_FIELDS:
            found[key] = " ".join(value.split())
    return found


def _daemon(pid: int) -> tuple[dict[str, str], str, str]:
    status = Path(f"/proc/{pid}/status").read_text()
    return (
        _fields(status),
        Path(f"/proc/{pid}/oom_score_adj").read_text().strip(),
        os.readlink(f"/proc/{pid}/cwd"),
    )


def _seen_by(guest: RunningGuest, user: str, cwd: str, pty: bool) -> tuple[dict[str, str], str]:
    size = (80, 24) if pty else None

    async def body() -> tuple[str, str]:
        client = guest.client
        status = await client.spawn("/bin/cat", ["/proc/self/status"], user=user, pty=size)
        out, _, end = await collect(status)
        assert end.exit_code == 0, out
        own = await client.spawn("/bin/sh", ["-c", _SELF], user=user, cwd=cwd, pty=size)
        said, _, end = await collect(own)
        assert end.exit_code == 0, said
        return out.decode(), said.decode().replace("\r", "")

    status, said = run(body())
    return _fields(status), said


@pytest.fixture
def ready_guest(start_guest: StartGuest) -> RunningGuest:
    guest = start_guest({"default_user": "root"}, prefix=_AMBIENT)
    guest.wait_event("ambient_capabilities_cleared")  # logged before "started"
    assert int(_daemon(guest.pid)[0]["CapAmb"], 16) == 0
    assert not [line for line in guest.log if "direct_spawn_unavailable" in line]
    return guest


@pytest.fixture
def user_dir(test_user: pwd.struct_passwd, tmp_path: Path) -> Path:
    """A fresh directory the user may enter (pytest's own are private to root)."""
    path = Path(test_user.pw_dir) / tmp_path.name
    path.mkdir(mode=0o755)
    return path


def test_a_spawned_command_is_set_up_as_a_forked_one(
    ready_guest: RunningGuest, test_user: pwd.struct_passwd, user_dir: Path
) -> None:
    before = _daemon(ready_guest.pid)
    spawned, spawned_said = _seen_by(ready_guest, test_user.pw_name, str(user_dir), pty=False)
    forked, forked_said = _seen_by(ready_guest, test_user.pw_name, str(user_dir), pty=True)

    # glibc's posix_spawn leaves its two internal signals (32 and 33, reserved by glibc
    # and below SIGRTMIN) ignored in the child; everything else is as a forked child has it.
    glibc_internal = (1 << 31) | (1 << 32)
    ignored = int(spawned.pop("SigIgn"), 16)
    assert ignored & ~glibc_internal == int(forked.pop("SigIgn"), 16)
    # SIGPIPE (13) and SIGXFSZ (25), which the daemon ignores, are back at their default.
    assert ignored & ((1 << 12) | (1 << 24)) == 0
    assert spawned == forked
    uid, gid = test_user.pw_uid, test_user.pw_gid
    assert spawned["Uid"] == f"{uid} {uid} {uid} {uid}"
    assert spawned["Gid"] == f"{gid} {gid} {gid} {gid}"
    assert spawned["Groups"].split() == [str(g) for g in os.getgrouplist(test_user.pw_name, gid)]
    for caps in ("CapPrm", "CapEff", "CapAmb"):
        assert int(spawned[caps], 16) == 0, caps
    assert spawned_said == forked_said == f"1000 1\n{user_dir}\n"

    assert _daemon(ready_guest.pid) == before  # ids, groups, capabilities, OOM score, cwd


@pytest.mark.parametrize("case", ["cwd the user may not enter", "command not on PATH"])
def test_a_spawned_command_fails_as_a_forked_one(
    ready_guest: RunningGuest, test_user: pwd.struct_passwd, user_dir: Path, case: str
) -> None:
    closed = user_dir / "closed"  # root's, mode 700
    closed.mkdir(mode=0o700)
    cmd, cwd = ("/bin/true", str(closed)) if case.startswith("cwd") else ("no-such-cmd", "")
    before = _daemon(ready_guest.pid)

    def failure(**pty: Any) -> GuestError:
        with pytest.raises(GuestError) as info:
            run(
                ready_guest.client.spawn(
                    cmd, user=test_user.pw_name, cwd=cwd, envs={"PATH": "/usr/bin:/bin"}, **pty
                )
            )
        return info.value

    spawned, forked = failure(), failure(pty=(80, 24))
    assert (spawned.connect, spawned.message) == (forked.connect, forked.message)
    assert spawned.connect == "invalid_argument"
    expected = "Permission denied" if case.startswith("cwd") else "No such file or directory"
    assert expected in spawned.message
    assert _daemon(ready_guest.pid) == before
