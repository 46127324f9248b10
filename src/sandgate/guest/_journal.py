"""The sandbox's process log: what its processes did, kept for the gateway to collect.

E2B's sandbox logs hold envd's own records of every process: its start (pid, command), each
line it wrote to stdout or stderr, and its end (exit status). The guest keeps the same records
here, whether or not anyone is streaming the process, and the gateway collects them (``logs``
operation) into the store, where ``GET /sandboxes/{id}/logs`` reads them.

Trust: the records describe untrusted processes (their output is arbitrary bytes, decoded as
UTF-8 with replacement). Everything here is bounded, so no process can grow the guest's memory
through it: a line is cut into segments of :data:`MAX_LINE` bytes; a process's output is
recorded up to :data:`PROCESS_BUDGET_BYTES` or :data:`PROCESS_BUDGET_LINES` (then one warning
says so, as envd's "output truncated" marker does); the whole journal is a ring of
:data:`MAX_ENTRIES` entries and :data:`MAX_BYTES` of text whose oldest entries go first. The
gateway sees a gap in the sequence numbers when entries went before it collected them. PTY
output is not recorded (terminal traffic, as on E2B); PTY processes' starts and ends are.

Runs on the daemon's event loop only (no locks). Recording costs one ``bytes.split`` per output
chunk while a process is within its budget, and one comparison after.
"""

from __future__ import annotations

import time

from ._lean import dumps

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    from collections import deque
    from typing import Any

    #: seq, unix time, level, event, pid, stream, message, fields
    Entry = tuple[int, float, str, str, int, str | None, str, dict[str, Any] | None]
else:
    from _collections import deque  # what ``collections`` re-exports, without its imports

__all__ = [
    "MAX_BYTES",
    "MAX_ENTRIES",
    "MAX_LINE",
    "PROCESS_BUDGET_BYTES",
    "PROCESS_BUDGET_LINES",
    "Journal",
]

MAX_ENTRIES = 4096
MAX_BYTES = 1024 * 1024
MAX_LINE = 4096
PROCESS_BUDGET_BYTES = 1024 * 1024
PROCESS_BUDGET_LINES = 10_000
#: Text per ``logs`` reply; the gateway asks again while ``more`` is true.
REPLY_BYTES = 512 * 1024
#: Characters of a command line kept in its start record.
_COMMAND_PREVIEW = 1024
_ENTRY_OVERHEAD = 64
TRUNCATED = "[output truncated: the process exceeded the log capture limit]"


class _Output:
    """One process's recording state: its partial lines and what is left of its budget."""

    __slots__ = ("bytes_left", "lines_left", "partial", "truncated")

    def __init__(self) -> None:
        self.partial: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        self.bytes_left = PROCESS_BUDGET_BYTES
        self.lines_left = PROCESS_BUDGET_LINES
        self.truncated = False


class Journal:
    def __init__(self) -> None:
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        self._seq = 0
        self._open: dict[int, _Output] = {}

    # ---- recording

    def started(self, pid: int, argv: list[str], user: str, tag: str | None, pty: bool) -> None:
        command = " ".join(argv)[:_COMMAND_PREVIEW]
        fields: dict[str, Any] = {"command": command, "user": user}
        if tag is not None:
            fields["tag"] = tag
        if pty:
            fields["pty"] = "true"
        else:
            self._open[pid] = _Output()
        self._add("info", "process_start", pid, None, f"Process with pid {pid} started", fields)

    def output(self, pid: int, stream: str, data: bytes) -> None:
        state = self._open.get(pid)
        if state is None or state.truncated:
            return
        lines = (state.partial[stream] + data).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if not self._line(pid, stream, state, line):
                return
        while len(rest) >= MAX_LINE:
            if not self._line(pid, stream, state, rest[:MAX_LINE]):
                return
            rest = rest[MAX_LINE:]
        state.partial[stream] = rest

    def ended(self, pid: int, end: dict[str, Any]) -> None:
        state = self._open.pop(pid, None)
        if state is not None and not state.truncated:
            for stream, rest in state.partial.items():
                if rest and not self._line(pid, stream, state, rest):
                    break
        fields = {
            "exit_code": end.get("exit_code"),
            "status": end.get("status"),
            "exited": end.get("exited"),
        }
        if end.get("timed_out"):
            fields["timed_out"] = True
        self._add("info", "process_end", pid, None, f"Process with pid {pid} ended", fields)

    def _line(self, pid: int, stream: str, state: _Output, raw: bytes) -> bool:
        """Records one line, in segments of :data:`MAX_LINE` bytes (an empty line is not
        recorded, as on E2B); False once the process's budget is spent."""
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        for start in range(0, len(raw), MAX_LINE):
            segment = raw[start : start + MAX_LINE]
            if state.bytes_left <= 0 or state.lines_left <= 0:
                state.truncated = True
                state.partial = {"stdout": b"", "stderr": b""}
                self._add("warn", "process_output", pid, None, TRUNCATED, None)
                return False
            state.bytes_left -= len(segment)
            state.lines_left -= 1
            text = segment.decode("utf-8", "replace")
            self._add("info", "process_output", pid, stream, text, None)
        return True

    def _add(
        self,
        level: str,
        event: str,
        pid: int,
        stream: str | None,
        message: str,
        fields: dict[str, Any] | None,
    ) -> None:
        self._seq += 1
        self._entries.append((self._seq, time.time(), level, event, pid, stream, message, fields))
        self._bytes += len(message) + _ENTRY_OVERHEAD
        while len(self._entries) > MAX_ENTRIES or self._bytes > MAX_BYTES:
            dropped = self._entries.popleft()
            self._bytes -= len(dropped[6]) + _ENTRY_OVERHEAD

    # ---- collection

    def reply(self, after: int) -> bytes:
        """The ``logs`` reply body (JSON, already encoded): entries with a sequence number
        above ``after``, oldest first, about :data:`REPLY_BYTES` of them at most. ``first`` is
        the oldest sequence number still held (entries between ``after`` and it were dropped),
        ``last`` the newest ever recorded, ``more`` whether entries are left for the next ask."""
        parts: list[str] = []
        size = 0
        more = False
        first = self._entries[0][0] if self._entries else self._seq + 1
        for entry in self._entries:
            if entry[0] <= after:
                continue
            if size >= REPLY_BYTES:
                more = True
                break
            encoded = dumps(entry)
            parts.append(encoded)
            size += len(encoded)
        head = dumps({"ok": True, "first": first, "last": self._seq, "more": more})
        return (head[:-1] + ',"entries":[' + ",".join(parts) + "]}").encode()
