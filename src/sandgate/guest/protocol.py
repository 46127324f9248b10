"""The compact protocol between the gateway and the guest daemon (stdlib only).

Trust: the gateway trusts nothing the guest says beyond "this is what happened inside the
sandbox". The guest trusts the gateway completely: whoever can open ``guest.sock`` is the
gateway (the socket lives in a host directory that only the gateway and the sandbox can
reach). Every public protocol (E2B Connect-RPC, REST, code interpreter) is served by the
gateway and translated into this one.

Transport: a Unix stream socket, ``/run/sandgate/guest.sock`` inside the sandbox. One
connection carries exactly one request; long operations (a process stream, a file read, a
watch, a port tunnel) keep the connection for their whole life, and closing the connection
cancels the *stream*, never the work (a process keeps running when its watcher leaves).

Framing: every message is a frame ``kind:u8 | length:u32 big-endian | payload``.

=====  =========  ==================================================================
kind   name       payload
=====  =========  ==================================================================
0      JSON       one UTF-8 JSON object (requests, replies, events)
1      STDOUT     raw bytes a process wrote to stdout
2      STDERR     raw bytes a process wrote to stderr
3      PTY        raw bytes a PTY process wrote
4      DATA       raw bytes of a file (read or write) or of stdin
5      EOF        empty: the sender has no more DATA
=====  =========  ==================================================================

The first frame on a connection is the request, a JSON frame with ``op``. Replies:

* unary operations answer one JSON frame, ``{"ok": true, ...}`` or an error
  ``{"ok": false, "code": "<connect code>", "message": "...", "reason"?: "..."}`` where the
  code is one of :data:`ERROR_CODES` (Connect-RPC names, mapped to HTTP/E2B at the gateway's
  edge) and the optional reason one of :data:`ERROR_REASONS`, a refinement the gateway maps
  to its own error (``disk_full``: the sandbox's disk or quota is full);
* ``spawn``/``connect`` stream ``{"ev": "start", "pid": N}``, output frames (kinds 1-3),
  and exactly one ``{"ev": "end", ...}`` before the guest closes the connection. A failure
  before the start is ``{"ok": false, ...}``;
* ``read_file`` answers ``{"ok": true, "size": N, "name": ..., "offset": O, "length": L}``
  (``size`` is the file's size, ``length`` the number of bytes that follow) then DATA frames
  then EOF. A file the kernel generates (procfs, sysfs: ``_kernelfiles``) is read to its end
  first, so ``size`` is what was read; one larger than ``MAX_UNSIZED`` is refused with reason
  ``too_large``;
* ``list_dir`` answers one or more ``{"ok": true, "entries": [...], "more": bool}`` frames
  (a large listing is split so that no frame exceeds :data:`MAX_FRAME`); the last has
  ``"more": false``;
* ``watch`` answers ``{"ok": true, "sync": true}`` once its watches are in place, then
  ``{"ev": "fs", ...}`` frames until either side closes. The client may send
  ``{"sync": N}``: the guest then reports every event the kernel has queued so far and answers
  ``{"ev": "synced", "n": N}`` after them (a guest without ``"sync"`` in its answer does not
  know this; anything else from the client ends the watch);
* ``write_file``: the client sends the request, then DATA frames, then EOF; the guest
  answers once with the entry it wrote;
* ``write_files``: for each file the client sends ``{"path": ...}``, its DATA frames and
  EOF; then ``{"commit": true}``. The guest stages each file in a temp file beside its target
  and renames them all into place only at the commit, answering
  ``{"ok": true, "entries": [...]}``. If the connection ends (closed or half-closed) before
  the commit, every staged file is removed and no target changes. Both write operations
  answer before the end only to refuse (``{"ok": false, ...}``), and then stop reading;
* ``tunnel`` answers ``{"ok": true}`` and then both sides exchange raw bytes (no framing).
  With ``"wait_s": S`` (0 to :data:`MAX_TUNNEL_WAIT_S`) the guest keeps trying the port for
  up to S seconds before it answers ``unavailable``: a template's readiness check waits in the
  sandbox, where a retry costs one ``connect``, instead of polling from the gateway (a guest
  that predates the field answers at once, and the gateway polls as before).

JSON frames are decoded by :func:`decode_json`, which is ``sandgate.strictjson`` (shipped in
the guest's zipapp): the gateway never acts on a guest reply with a duplicate key, ``NaN``,
an out-of-range integer or nesting beyond the cap, and the guest holds its requests to the same
rules. Lone surrogates are the one exception: names that are not UTF-8 inside the sandbox
travel as ``surrogateescape`` code points (``"\\udcff"``), in both directions.
"""

from __future__ import annotations

import struct

from sandgate.strictjson import loads_object

from ._lean import dumps

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = [
    "DISK_FULL",
    "EGRESS_PROXY_PORT",
    "EGRESS_SOCKET",
    "ERROR_CODES",
    "ERROR_REASONS",
    "FILE_CHUNK",
    "FILE_OP_NAMES",
    "FRAME_HEADER",
    "MAX_FRAME",
    "MAX_REQUEST",
    "MAX_TUNNEL_WAIT_S",
    "MAX_WORKER_MESSAGE",
    "OUTPUT_CHUNK",
    "PROTOCOL_VERSION",
    "PTY_CHUNK",
    "SUDO_SOCKET",
    "TOO_LARGE",
    "Kind",
    "decode_json",
    "encode_frame",
    "encode_json",
]

PROTOCOL_VERSION: Final = 1
FRAME_HEADER: Final = struct.Struct(">BI")
#: Largest frame either side accepts; bigger payloads are split by the sender.
MAX_FRAME: Final = 4 * 1024 * 1024
#: Largest first (request) frame the guest accepts; requests carry paths and small maps only.
MAX_REQUEST: Final = 1024 * 1024
#: Largest request the daemon forwards to a file worker (a seqpacket message must fit the buffer).
MAX_WORKER_MESSAGE: Final = 128 * 1024
#: The operations the daemon hands to the requesting user's file worker (``_files.FILE_OPS``
#: implements them; named here so the daemon answers everything else without importing them).
FILE_OP_NAMES: Final = frozenset(
    {
        "stat", "list_dir", "make_dir", "move", "remove", "read_file", "write_file",
        "write_files", "watch",
    }
)  # fmt: skip
#: Longest a ``tunnel`` request may ask the guest to wait for its port to accept.
MAX_TUNNEL_WAIT_S: Final = 10.0
#: Largest STDOUT/STDERR frame payload the guest sends.
OUTPUT_CHUNK: Final = 32 * 1024
#: Largest PTY frame payload the guest sends.
PTY_CHUNK: Final = 16 * 1024
#: Largest DATA frame payload the guest sends for a file read (the client may send up to MAX_FRAME).
FILE_CHUNK: Final = 1024 * 1024

#: Where the guest's egress relay listens inside the sandbox (``127.0.0.1`` only), and the
#: gateway socket it relays each connection to (served by ``sandgate.egress``).
EGRESS_PROXY_PORT: Final = 3128
EGRESS_SOCKET: Final = "/run/sandgate/egress.sock"
#: Where the guest takes ``sudo`` requests from processes inside the sandbox: an abstract Unix
#: socket, so it exists only in the sandbox's own network namespace (``_sudo``).
SUDO_SOCKET: Final = "\0sandgate-sudo"

ERROR_CODES: Final = frozenset(
    {
        "invalid_argument",
        "not_found",
        "already_exists",
        "permission_denied",
        "unauthenticated",
        "resource_exhausted",
        "failed_precondition",
        "deadline_exceeded",
        "unavailable",
        "internal",
        "unimplemented",
    }
)

#: ``reason`` of an error reply: the write does not fit the sandbox's disk (ENOSPC, EDQUOT, or
#: EFBIG from a file-size rlimit set to the disk size); its code is ``resource_exhausted``.
DISK_FULL: Final = "disk_full"
#: ``reason`` of an error reply: a file with no fixed size (procfs, sysfs) yields more than the
#: guest reads of one; its code is ``invalid_argument``.
TOO_LARGE: Final = "too_large"
ERROR_REASONS: Final = frozenset({DISK_FULL, TOO_LARGE})


class Kind:
    """Frame kinds; plain ints so the stdlib-only guest needs no enum machinery on hot paths."""

    JSON: Final = 0
    STDOUT: Final = 1
    STDERR: Final = 2
    PTY: Final = 3
    DATA: Final = 4
    EOF: Final = 5


def encode_frame(kind: int, payload: bytes = b"") -> bytes:
    """Returns one frame; the caller splits payloads larger than :data:`MAX_FRAME`."""
    return FRAME_HEADER.pack(kind, len(payload)) + payload


def encode_json(message: dict[str, Any]) -> bytes:
    return encode_frame(Kind.JSON, dumps(message).encode())


def decode_json(payload: bytes) -> dict[str, Any]:
    """The object in a JSON frame; raises ``ValueError`` (``StrictJsonError``) otherwise."""
    return loads_object(payload, allow_surrogates=True)
