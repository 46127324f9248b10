"""What the posture tests read from the host: capability masks and ``/proc/<pid>/status``."""

from __future__ import annotations

from pathlib import Path

from sandgate.runtimes.base import GUEST_CAPABILITIES

_CAP_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
}
#: The capability mask of the guest's documented set (the same on both runtimes).
GUEST_MASK = sum(1 << _CAP_BITS[name] for name in GUEST_CAPABILITIES)

_MIB = 1024 * 1024
#: The cgroup memory limit of a sandbox on default limits (docs/operations.md): 512 MiB for
#: processes, plus the in-memory file systems at full size (its disk, 2048 MiB, and /dev/shm,
#: 64 MiB) and 1 KiB for each of their inodes (64 per MiB).
DEFAULT_MEMORY_LIMIT = (512 + 2048 + 64) * _MIB + (2048 + 64) * 64 * 1024


def proc_status(pid: int) -> dict[str, str]:
    """The fields of ``/proc/<pid>/status`` (``CapEff``, ``NoNewPrivs``, ``Seccomp``, ...)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields
