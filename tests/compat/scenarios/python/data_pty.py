"""PTY sessions (issue 3): create with a size, input, resize (seen by ``stty size``), raw colour
sequences, list, kill, and reconnect by pid from a second handle."""

from __future__ import annotations

from typing import Any

from _common import attempt, describe_error, run
from _data import Waiter, poll
from e2b import PtySize, Sandbox

SIZE_PROBE = b'echo "SIZE:$(stty size):END"\n'
COLOUR_PROBE = b"printf '\\033[31mR%sD\\033[0m\\n' E\n"


def _size(waiter: Waiter, rows: int, cols: int) -> bool:
    return f"SIZE:{rows} {cols}:END" in waiter.pty_text()


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create("base")
    try:
        handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
        waiter = Waiter(handle, pty=True)
        out["listed"] = any(p.pid == handle.pid for p in sbx.commands.list())
        sbx.pty.send_stdin(handle.pid, SIZE_PROBE)
        out["initial_size"] = bool(poll(lambda: _size(waiter, 24, 80), 15))
        sbx.pty.resize(handle.pid, PtySize(rows=40, cols=132))
        sbx.pty.send_stdin(handle.pid, SIZE_PROBE)
        out["resized"] = bool(poll(lambda: _size(waiter, 40, 132), 15))
        sbx.pty.send_stdin(handle.pid, COLOUR_PROBE)
        out["colour"] = bool(poll(lambda: "\x1b[31mRED\x1b[0m" in waiter.pty_text(), 15))
        sbx.pty.send_stdin(handle.pid, b"echo TERM=$TERM USER=$(whoami)\n")
        out["env"] = bool(poll(lambda: "TERM=xterm-256color USER=user" in waiter.pty_text(), 15))
        out["kill"] = sbx.pty.kill(handle.pid)
        out["kill_wait"] = waiter.join()
        out["kill_again"] = sbx.pty.kill(handle.pid)

        # Reconnect by pid: the first handle disconnects, a new one receives live output.
        handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
        pid = handle.pid
        handle.disconnect()
        reconnected = sbx.pty.connect(pid, timeout=0)
        waiter = Waiter(reconnected, pty=True)
        sbx.pty.send_stdin(pid, b"echo RE-$((6*7))\n")
        out["reconnected_output"] = bool(poll(lambda: "RE-42" in waiter.pty_text(), 15))
        sbx.pty.send_stdin(pid, b"exit\n")
        out["exit_wait"] = waiter.join()
    except Exception as exc:
        out["scenario_error"] = describe_error(exc)
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
