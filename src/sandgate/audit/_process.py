"""The audit writer as a process of its own (``serve``).

Sealing a batch onto the chain, checking the file's head, the write, the fsync and the index
transaction are about as much Python per record as the tool call they record; on the writer
thread they held the server's one interpreter lock for that long, so the event loop waited
for them (docs/benchmarks.md, "Tool calls"). In a process of their own they run beside it.
The server's event loop (``audit._pump``; or the writer thread, ``AuditLog.start_process``)
sends the records' canonical lines to this process and waits for their links on the chain
(``seq``, ``prev``, ``hash``).

The process is an ``AuditLog`` of the same file and store, committing batches one by one with
the very code the thread uses (``AuditLog.commit``): the same ``flock``, head check against
the anchor, tamper verdicts, fsync, index and checkpoints. It holds no state a crash could
lose: a record is acknowledged only once durable and indexed, and a crash between the two is
what the next head check repairs (``_index_gap``). It reads one batch per line on its stdin
and answers one line on its stdout; it ends when its stdin closes (the server ended, however),
so it never outlives the server, and it ignores SIGINT and SIGTERM (a batch is never cut
short: the server, told to stop, writes what it holds and then closes the pipe). Its logs go
to the server's stderr.

Wire (JSON lines): the first line is the set-up (``directory``, ``store_url``, ``fsync``,
``checkpoint``, ``log_level``, ``json_logs``), answered ``{"ready": true}``; then each line is
a JSON array of records, answered ``{"links": [[seq, prev, hash], ...]}`` or
``{"error": {"code", "message"}, "tampered": {...} | null}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import structlog

from sandgate.errors import AuditUnavailable, SandgateError, error_for_code

if TYPE_CHECKING:
    from sandgate.audit.log import AuditLog

__all__ = ["Link", "Refused", "Tampered", "WriterProcess", "batch_line", "ended", "outcome_of"]

#: A record's place on the chain, as the process sealed it: (seq, prev, hash).
Link = tuple[int, str, str]


@dataclass(frozen=True)
class Tampered:
    """The process's verdict on a tampered log, mirrored by the server's ``AuditLog``."""

    problem: str | None
    first_bad: int | None
    since: str | None
    inode: int | None


class WriterProcess:
    """The server's end: starts the process, hands it batches, ends it. Used by one thread
    at a time (the writer thread; ``close`` once that thread has stopped)."""

    def __init__(self, setup: dict[str, Any]) -> None:
        self._setup = setup
        self._process: subprocess.Popen[bytes] | None = None
        #: The last refused batch's verdict on a tampered log (None if it carried none);
        #: read by ``AuditLog`` after the refusal.
        self.tampered: Tampered | None = None

    def start(self) -> None:
        """Starts the process and waits until it is ready; raises ``AuditUnavailable``."""
        # This very code, wherever it was imported from (a checkout, a venv, PYTHONPATH).
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, path]))}
        process = subprocess.Popen(
            [sys.executable, "-c", "from sandgate.audit._process import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env=env,
            # The server's own session, so the scheduler shares one group's time between
            # them: in a session of its own (an autogroup of its own) it waited behind every
            # other group of a busy machine at each batch (2-3 x fewer tool calls per second
            # than the writer thread, measured under load). A terminal's Ctrl-C reaches it
            # too, and is ignored (``main``).
        )
        self._process = process
        try:
            reply = self._exchange(json.dumps(self._setup).encode() + b"\n")
        except AuditUnavailable:
            self.close()
            raise
        if reply.get("ready") is not True:
            self.close()
            raise AuditUnavailable(
                f"the audit writer process did not start: {_error_message(reply)}"
            )

    def restart(self) -> None:
        """Ends this process (if it has not ended) and starts a new one; raises
        ``AuditUnavailable`` (or ``OSError``) when the new one cannot start."""
        self.close()
        self.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def exit_code(self) -> int | None:
        """The process's exit code once it has ended (None while it runs, or never ran)."""
        return self._process.poll() if self._process is not None else None

    def commit(self, texts: list[str]) -> list[Link]:
        """Seals and writes the records (their canonical JSON, in order) as one batch;
        returns their links. Raises the ``SandgateError`` the process reported
        (``AuditTampered``, ``AuditUnavailable``), or ``AuditUnavailable`` when the process
        is gone or ends meanwhile (``AuditLog`` starts it again for the next batch)."""
        if not self.running:
            raise AuditUnavailable("the audit writer process is not running")
        outcome = outcome_of(self._exchange(batch_line(texts)), len(texts))
        if isinstance(outcome, Refused):
            # This reply's verdict only: a refusal that carries none must not repeat an old one.
            self.tampered = outcome.tampered
            raise outcome.error
        return outcome

    def pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        """The process's stdin and stdout, for an event loop that takes the exchange over
        (``audit._pump``); ``commit`` must not be called once it has."""
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        return process.stdin, process.stdout

    def close(self) -> None:
        """Ends the process (it writes what it holds first: it reads to its stdin's end)."""
        process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _exchange(self, line: bytes) -> dict[str, Any]:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(line)
            process.stdin.flush()
            answer = process.stdout.readline()
        except (OSError, ValueError):
            answer = b""
        if not answer:
            code = process.poll()
            self.close()
            raise ended(code)
        try:
            reply = json.loads(answer)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.close()
            raise AuditUnavailable("the audit writer process answered out of turn; restarting it")
        return reply


@dataclass(frozen=True)
class Refused:
    """A batch the process refused: the error it reported, and its verdict on a tampered
    log (None unless it found one)."""

    error: SandgateError
    tampered: Tampered | None


def batch_line(texts: list[str]) -> bytes:
    """One batch on the wire: the records' canonical JSON as a JSON array, on one line."""
    return b"[" + ",".join(texts).encode() + b"]\n"


def outcome_of(reply: dict[str, Any], count: int) -> list[Link] | Refused:
    """The links of a batch of ``count`` records, or what the process refused it with."""
    links = reply.get("links")
    if isinstance(links, list) and len(links) == count:
        return [(int(seq), str(prev), str(digest)) for seq, prev, digest in links]
    error = reply.get("error") or {}
    tampered = reply.get("tampered")
    return Refused(
        error_for_code(
            str(error.get("code", "audit_unavailable")),
            _error_message(reply),
            error.get("status"),
        ),
        Tampered(
            tampered.get("problem"),
            tampered.get("first_bad"),
            tampered.get("since"),
            tampered.get("inode"),
        )
        if isinstance(tampered, dict)
        else None,
    )


def ended(code: int | None) -> AuditUnavailable:
    """What a batch's callers hear when the process ended before it answered."""
    return AuditUnavailable(
        "the audit writer process ended"
        + (f" (exit code {code})" if code is not None else "")
        + " before it confirmed this record; the next record starts it again"
    )


def _error_message(reply: dict[str, Any]) -> str:
    error = reply.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return "no reason given"


# -- the process ----------------------------------------------------------------------------


def main() -> None:
    # It ends when the server closes its stdin, never in the middle of a batch: a signal
    # meant for the server (a service manager's SIGTERM to the whole group) is the server's
    # to act on, and the server then closes the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Replies go to the pipe the server reads; anything else printed goes to stderr.
    replies: IO[bytes] = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    first = requests.readline()
    if not first:
        return
    try:
        log = _open(json.loads(first))
    except Exception as exc:  # told to the server, which reports it and writes in-thread
        _answer(replies, {"error": {"code": "audit_unavailable", "message": repr(exc)[:500]}})
        return
    _answer(replies, {"ready": True})
    for line in requests:
        _answer(replies, _commit(log, line))


def _open(setup: dict[str, Any]) -> AuditLog:
    from sandgate.audit.checkpoint import Checkpointer
    from sandgate.audit.log import AuditLog
    from sandgate.logs import configure_logging
    from sandgate.store import Store

    configure_logging(setup.get("log_level", "info"), json_logs=bool(setup.get("json_logs")))
    store_url = setup.get("store_url")
    store = Store.connect(store_url) if store_url else None
    checkpoint = setup.get("checkpoint")
    checkpointer = (
        Checkpointer(
            Path(checkpoint["path"]),
            bytes.fromhex(checkpoint["key"]),
            int(checkpoint["every_records"]),
            float(checkpoint["every_s"]),
        )
        if checkpoint
        else None
    )
    return AuditLog(
        Path(setup["directory"]), store, fsync=bool(setup["fsync"]), checkpoint=checkpointer
    )


def _commit(log: AuditLog, line: bytes) -> dict[str, Any]:
    try:
        records = json.loads(line)
        sealed = log.commit(records)
    except SandgateError as exc:
        health, tampered = log.health, None
        if health.state == "tampered":
            tampered = {
                "problem": health.problem,
                "first_bad": health.first_bad,
                "since": health.since,
                "inode": log.tampered_inode,
            }
        return {
            "error": {"code": exc.code, "message": exc.message, "status": exc.status},
            "tampered": tampered,
        }
    except Exception as exc:  # a writer bug: the batch fails, the process goes on
        structlog.get_logger("sandgate.audit").exception("audit.writer_failed")
        message = f"the audit writer failed ({type(exc).__name__})"
        return {"error": {"code": "audit_unavailable", "message": message}}
    return {"links": [[r["seq"], r["prev"], r["hash"]] for r in sealed]}


def _answer(replies: IO[bytes], reply: dict[str, Any]) -> None:
    replies.write(json.dumps(reply).encode() + b"\n")
    replies.flush()
