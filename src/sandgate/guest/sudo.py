"""``sudo`` inside a sandbox: asks the guest to run a command as root (see ``_sudo``).

Passwordless for every user, as on E2B. Understands the options people and tools use:
``-u USER``, ``-i`` (login shell), ``-s`` (shell), ``-E``/``--preserve-env`` (the environment
is always kept, with ``HOME``/``USER``/``LOGNAME`` set for the target user), ``-H``, ``-n``,
``-S``, ``-k``/``-K``/``-v`` (nothing to do), ``-l``, ``-D DIR``, ``-V``, ``-h``, ``--``, and
``NAME=value`` assignments before the command. The command gets this process's stdin, stdout
and stderr; signals sent to ``sudo`` are passed on; its exit status is the command's.

Runs with ``python3 -I -S`` from ``/run/sandgate/guest.pyz``; stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from .protocol import FRAME_HEADER, SUDO_SOCKET, Kind, encode_frame

__all__ = ["main", "parse"]

_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_USAGE = """usage: sudo [-EHiknsSv] [-u user] [-D directory] [--] [VAR=value] command [arg ...]
Sandgate's sudo: runs the command as root of this sandbox (passwordless)."""


class UsageError(Exception):
    pass


@dataclass
class Request:
    argv: list[str] = field(default_factory=list)
    user: str = "root"
    login: bool = False
    shell: bool = False
    chdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: What to do instead of running a command: "list", "version", "help", "validate".
    action: str | None = None


_FLAGS = {
    "E": None,
    "H": None,
    "n": None,
    "S": None,
    "P": None,
    "A": None,
    "b": None,
    "k": "validate",
    "K": "validate",
    "v": "validate",
    "l": "list",
    "V": "version",
    "h": "help",
    "i": "login",
    "s": "shell",
}
_LONG = {
    "--preserve-env": None,
    "--set-home": None,
    "--non-interactive": None,
    "--stdin": None,
    "--askpass": None,
    "--background": None,
    "--preserve-groups": None,
    "--reset-timestamp": "validate",
    "--remove-timestamp": "validate",
    "--validate": "validate",
    "--list": "list",
    "--version": "version",
    "--help": "help",
    "--login": "login",
    "--shell": "shell",
}
_WITH_VALUE_SHORT = {
    "u": "user",
    "D": "chdir",
    "g": "group",
    "p": "prompt",
    "C": "ignore",
    "T": "ignore",
    "r": "ignore",
    "t": "ignore",
}
_WITH_VALUE_LONG = {
    "--user": "user",
    "--chdir": "chdir",
    "--group": "group",
    "--prompt": "prompt",
    "--close-from": "ignore",
    "--command-timeout": "ignore",
    "--role": "ignore",
    "--type": "ignore",
}


def parse(args: list[str]) -> Request:
    """The request ``args`` (sudo's command line, without ``sudo``) asks for."""
    request = Request()
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name.startswith("--preserve-env"):
                index += 1
                continue
            if name in _LONG:
                _apply(request, _LONG[name])
                index += 1
                continue
            if name in _WITH_VALUE_LONG:
                if not eq:
                    index += 1
                    if index >= len(args):
                        raise UsageError(f"option '{name}' requires an argument")
                    value = args[index]
                _set(request, _WITH_VALUE_LONG[name], value)
                index += 1
                continue
            raise UsageError(f"unrecognized option '{arg}'")
        if arg.startswith("-") and len(arg) > 1:
            position = 1
            while position < len(arg):
                letter = arg[position]
                if letter in _WITH_VALUE_SHORT:
                    value = arg[position + 1 :]
                    if not value:
                        index += 1
                        if index >= len(args):
                            raise UsageError(f"option requires an argument -- '{letter}'")
                        value = args[index]
                    _set(request, _WITH_VALUE_SHORT[letter], value)
                    break
                if letter not in _FLAGS:
                    raise UsageError(f"invalid option -- '{letter}'")
                _apply(request, _FLAGS[letter])
                position += 1
            index += 1
            continue
        break
    rest = args[index:]
    while rest and "=" in rest[0] and not rest[0].startswith("=") and _is_name(rest[0]):
        name, _, value = rest[0].partition("=")
        request.env[name] = value
        rest = rest[1:]
    request.argv = rest
    return request


def _is_name(assignment: str) -> bool:
    name = assignment.partition("=")[0]
    return name.replace("_", "a").isalnum() and not name[0].isdigit()


def _apply(request: Request, action: str | None) -> None:
    if action == "login":
        request.login = True
    elif action == "shell":
        request.shell = True
    elif action is not None:
        request.action = action


def _set(request: Request, key: str, value: str) -> None:
    if key == "user":
        request.user = value
    elif key == "chdir":
        request.chdir = value
    elif key == "group" and value not in ("root", "0", "#0"):
        raise UsageError("-g: only the root group is supported in a sandbox")


def _command(request: Request) -> tuple[list[str], str | None]:
    """The argv to run and the working directory (None: the caller's; "": the target's home,
    for a login shell)."""
    if request.login or request.shell:
        shell = _shell_of(request.user) if request.login else os.environ.get("SHELL", "/bin/sh")
        argv = [shell, "-l"] if request.login else [shell]
        if request.argv:
            argv += ["-c", " ".join(request.argv)]
        return argv, request.chdir or ("" if request.login else None)
    return list(request.argv), request.chdir


def _shell_of(user: str) -> str:
    try:
        import pwd

        return pwd.getpwnam(user).pw_shell or "/bin/sh"
    except (ImportError, KeyError):
        return "/bin/sh"


def _fail(message: str, status: int = 1) -> NoReturn:
    print(f"sudo: {message}", file=sys.stderr)
    sys.exit(status)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        request = parse(args)
    except UsageError as exc:
        print(f"sudo: {exc}\n{_USAGE}", file=sys.stderr)
        sys.exit(1)
    if request.action == "help":
        print(_USAGE)
        sys.exit(0)
    if not (request.argv or request.action or request.login or request.shell):
        print(_USAGE, file=sys.stderr)
        sys.exit(1)
    if request.action == "version":
        print("Sudo version 1.9 (Sandgate sandbox shim)")
        sys.exit(0)
    if request.action == "list" and not request.argv:
        user = os.environ.get("USER") or str(os.getuid())
        print(f"User {user} may run the following commands on sandbox:")
        print("    (ALL : ALL) NOPASSWD: ALL")
        sys.exit(0)
    if request.action == "validate" and not request.argv:
        sys.exit(0)
    command, cwd = _command(request)
    env = dict(os.environ)
    env.update(request.env)
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = ""
    message = {"argv": command, "env": env, "cwd": cwd, "user": request.user}
    sys.exit(_run(message))


def _run(message: Mapping[str, object]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(SUDO_SOCKET)
    except OSError as exc:
        _fail(f"cannot reach this sandbox's guest ({exc.strerror}); is this a Sandgate sandbox?")
    fds, opened = [], []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            opened.append(null)
            fds.append(null)
    frame = encode_frame(Kind.JSON, json.dumps(message).encode())
    socket.send_fds(conn, [frame], fds)
    for fd in opened:
        os.close(fd)

    def forward(number: int, _frame: object) -> None:
        payload = encode_frame(Kind.JSON, json.dumps({"signal": number}).encode())
        with contextlib.suppress(OSError):
            conn.sendall(payload)

    for number in _FORWARDED:
        signal.signal(number, forward)
    reader = conn.makefile("rb")
    while True:
        header = reader.read(FRAME_HEADER.size)
        if len(header) < FRAME_HEADER.size:
            _fail("the sandbox's guest went away")
        _, length = FRAME_HEADER.unpack(header)
        reply = json.loads(reader.read(length))
        if reply.get("ok") is False:
            _fail(str(reply.get("message", "refused")))
        if reply.get("ev") == "exit":
            return _exit_code(int(reply["status"]))


def _exit_code(status: int) -> int:
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    number = os.WTERMSIG(status)
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    return 128 + number


if __name__ == "__main__":
    main()
