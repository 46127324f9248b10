"""Commands on the data plane (issue 3): background handles, env layering, cwd, users, stdin,
list, connect from a second client, kill of the whole process group, timeouts, streamed
callbacks, non-zero exits, late connect, and disconnect that leaves the process running."""

from __future__ import annotations

from typing import Any

from _common import attempt, command_result, describe_error, run
from _data import Waiter, outcome, poll
from e2b import Sandbox

GROUP_SCRIPT = "sleep 1000 & echo $! > {pidfile}; wait"


def _gone(sbx: Sandbox, pid: str) -> bool:
    """True once ``pid`` has no live (non-zombie) process inside the sandbox."""
    probe = sbx.commands.run(f"cat /proc/{pid}/stat 2>/dev/null || echo gone", user="root")
    text = probe.stdout.strip()
    return text == "gone" or text.split(") ", 1)[-1].startswith("Z")


def _pidfile(sbx: Sandbox, path: str) -> str:
    return str(poll(lambda: sbx.files.read(path).strip(), 10) or "")


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create("base", envs={"SBX_ONLY": "sandbox", "BOTH": "sandbox"})
    try:
        cmd = sbx.commands

        # --- env layering, cwd and users on background handles
        handle = cmd.run(
            'echo "$SBX_ONLY $BOTH $CMD_ONLY"',
            background=True,
            envs={"BOTH": "command", "CMD_ONLY": "x"},
        )
        out["bg_envs"] = outcome(lambda: command_result(handle.wait()))
        out["envs_after"] = command_result(cmd.run('echo "$SBX_ONLY ${BOTH} ${CMD_ONLY:-unset}"'))
        handle = cmd.run("pwd", background=True, cwd="/tmp")
        out["bg_cwd"] = outcome(lambda: command_result(handle.wait()))
        out["missing_cwd"] = outcome(lambda: cmd.run("pwd", cwd="/nonexistent/dir"))
        handle = cmd.run("id -un; id -u", background=True, user="root")
        out["bg_root"] = outcome(lambda: command_result(handle.wait()))
        handle = cmd.run("id -un; id -u", background=True, user="user")
        out["bg_user"] = outcome(lambda: command_result(handle.wait()))

        # --- stdin on: send_stdin twice (handle and commands), then close_stdin → EOF
        handle = cmd.run("cat; echo eof", background=True, stdin=True)
        waiter = Waiter(handle)
        cmd.send_stdin(handle.pid, "hello ")
        handle.send_stdin("world\n")
        out["stdin_echo_seen"] = bool(poll(lambda: "hello world\n" in waiter.stdout(), 10))
        out["close_stdin"] = attempt(lambda: handle.close_stdin())
        out["stdin_on"] = waiter.join()

        # --- stdin off (the default): the process reads EOF at once; send_stdin is refused
        out["stdin_off"] = command_result(cmd.run("cat; echo eof"))
        handle = cmd.run("sleep 30", background=True, stdin=False)
        out["send_stdin_without_stdin"] = attempt(lambda: cmd.send_stdin(handle.pid, "x"))
        out["close_stdin_without_stdin"] = attempt(lambda: cmd.close_stdin(handle.pid))
        cmd.kill(handle.pid)
        handle.disconnect()

        # --- commands.list shows a running process
        sleeper = cmd.run("sleep 300", background=True)
        listed = [p for p in cmd.list() if p.pid == sleeper.pid]
        out["list"] = [
            {"pid": p.pid, "cmd": p.cmd, "args": list(p.args), "cwd": p.cwd} for p in listed
        ]

        # --- kill: True, the stream ends with an exit error, the whole group dies
        handle = cmd.run(GROUP_SCRIPT.format(pidfile="/tmp/kill-child.pid"), background=True)
        waiter = Waiter(handle)
        child = _pidfile(sbx, "/tmp/kill-child.pid")
        out["kill_child_pid"] = child
        out["kill_child_alive_before"] = bool(child) and not _gone(sbx, child)
        out["kill"] = cmd.kill(handle.pid)
        out["kill_wait"] = waiter.join()
        out["kill_child_gone"] = bool(child) and bool(poll(lambda: _gone(sbx, child), 10))
        out["kill_again"] = cmd.kill(handle.pid)
        out["kill_unknown"] = cmd.kill(999_999)
        out["kill_sleeper"] = cmd.kill(sleeper.pid)
        sleeper.disconnect()

        # --- timeout = process lifetime, TimeoutException, and the group dies with it
        handle = cmd.run(
            GROUP_SCRIPT.format(pidfile="/tmp/timeout-child.pid"), background=True, timeout=3
        )
        waiter = Waiter(handle)
        child = _pidfile(sbx, "/tmp/timeout-child.pid")
        out["timeout_wait"] = waiter.join()
        out["timeout_child_gone"] = bool(child) and bool(poll(lambda: _gone(sbx, child), 10))
        out["timeout_in_list"] = any(p.pid == handle.pid for p in cmd.list())

        # --- callbacks streamed as produced (background, stdout and stderr)
        handle = cmd.run("echo one; echo e1 >&2; sleep 1.5; echo two; echo e2 >&2", background=True)
        waiter = Waiter(handle)
        out["stream"] = {"wait": waiter.join(), "chunks": waiter.chunks}

        # --- non-zero exit → CommandExitException with stdout, stderr and the code
        out["exit_error"] = attempt(lambda: cmd.run("echo out; echo err >&2; exit 3"))
        handle = cmd.run("echo bg-out; exit 4", background=True)
        out["exit_error_bg"] = outcome(lambda: handle.wait())

        # --- late connect: the exit status of a process that ended while nobody listened
        handle = cmd.run("sleep 0.5; exit 7", background=True)
        late_pid = handle.pid
        handle.disconnect()
        out["late_exited"] = bool(poll(lambda: all(p.pid != late_pid for p in cmd.list()), 10))
        out["late_connect"] = outcome(lambda: cmd.connect(late_pid).wait())
        out["connect_unknown"] = attempt(lambda: cmd.connect(999_999))

        # --- disconnect never kills: the process finishes its work afterwards
        handle = cmd.run("sleep 1; echo finished > /tmp/after-disconnect", background=True)
        handle.disconnect()
        out["disconnect_running"] = any(p.pid == handle.pid for p in cmd.list())
        out["after_disconnect"] = poll(lambda: sbx.files.read("/tmp/after-disconnect"), 15)

        # --- connect from a second client object; it drives stdin and gets the output and end
        handle = cmd.run("read line; echo got $line; exit 5", background=True, stdin=True)
        pid = handle.pid
        handle.disconnect()
        other = Sandbox.connect(sbx.sandbox_id)
        connected = other.commands.connect(pid)
        waiter = Waiter(connected)
        other.commands.send_stdin(pid, "over-there\n")
        out["second_client"] = {"pid": connected.pid, "wait": waiter.join(), "expected_pid": pid}
    except Exception as exc:
        out["scenario_error"] = describe_error(exc)
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
