"""The agent's Python process inside the sandbox (stdlib only; never imported by the gateway).

Started once per session as ``python3 -u _driver.py CELLS_DIR`` and kept running, so variables
persist between the model's code blocks. Control lines arrive on stdin: ``<cell id> <limit>``;
the cell's source is ``CELLS_DIR/<cell id>.py`` (and ``<cell id>.trace``, when the gateway
traces, the cell's ``TRACEPARENT``, so the tool calls it makes join the trace). While a cell
runs, file descriptors 1 and 2 point at ``<cell id>.out``/``.err`` (so subprocesses are captured
too) and stdin at /dev/null.
Afterwards one line goes to the real stdout::

    \\x1esandgate-cell {"cell": ..., "exit_code": ..., "stdout": <tail>, "stderr": <tail>,
                       "stdout_bytes": N, "stderr_bytes": N}

SIGINT interrupts the running cell (exit code 130). Not a security boundary: it runs as the
sandbox user, like the code it runs.
"""

import contextlib
import json
import os
import signal
import sys
import traceback
from typing import Any

MARK = "\x1esandgate-cell "
_running = False


def _interrupt(signum: int, frame: Any) -> None:
    if _running:
        raise KeyboardInterrupt


def _tail(path: str, limit: int) -> tuple[str, int]:
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        handle.seek(max(0, size - limit))
        data = handle.read()
    return data.decode("utf-8", "replace"), size


def _run(source: str, name: str, scope: dict[str, Any]) -> int:
    try:
        code = compile(source, name, "exec")
    except SyntaxError:
        traceback.print_exc(limit=0)
        return 1
    try:
        exec(code, scope)  # noqa: S102 - running the model's code is this process's job
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        print("KeyboardInterrupt: the code was interrupted (time limit)", file=sys.stderr)
        return 130
    except BaseException as exc:
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb else None)
        return 1
    return 0


def _set_traceparent(path: str) -> None:
    try:
        with open(path, encoding="ascii") as handle:
            os.environ["TRACEPARENT"] = handle.read().strip()
    except (OSError, ValueError):
        os.environ.pop("TRACEPARENT", None)


def main() -> None:
    global _running
    cells = sys.argv[1]
    control = os.fdopen(os.dup(0), "r")
    results = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    scope: dict[str, Any] = {"__name__": "__main__"}
    signal.signal(signal.SIGINT, _interrupt)
    saved_out, saved_err = os.dup(1), os.dup(2)
    for line in control:
        parts = line.split()
        if len(parts) != 2:
            continue
        cell, limit = parts[0], int(parts[1])
        base = os.path.join(cells, cell)
        with open(base + ".py", encoding="utf-8") as handle:
            source = handle.read()
        _set_traceparent(base + ".trace")
        out = os.open(base + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(base + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(err, 2)
        try:
            _running = True
            exit_code = _run(source, "<code>", scope)
        except KeyboardInterrupt:
            exit_code = 130
        finally:
            _running = False
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(out)
            os.close(err)
        stdout, stdout_bytes = _tail(base + ".out", limit)
        stderr, stderr_bytes = _tail(base + ".err", limit)
        report = {
            "cell": cell,
            "exit_code": exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_bytes": stdout_bytes,
            "stderr_bytes": stderr_bytes,
        }
        results.write(MARK + json.dumps(report) + "\n")
        for suffix in (".py", ".out", ".err", ".trace"):
            with contextlib.suppress(OSError):
                os.unlink(base + suffix)


if __name__ == "__main__":
    main()
