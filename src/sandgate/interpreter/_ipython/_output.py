"""Bounds what one cell may write to stdout and stderr.

Past ``limit`` characters in one cell, the cell gets a truncation note on stderr and an
``OutputLimitExceeded`` (a ``BaseException``, so ``except Exception`` does not swallow it); the
count restarts with each cell. Stopping the writer inside the kernel keeps a print loop from
growing ipykernel's buffers until the sandbox runs out of memory; the server's own limit is
the backstop for what this cannot see (results, output of other kernels).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["OutputLimitExceeded", "bound_output"]


class OutputLimitExceeded(BaseException):
    """The cell wrote more than the limit; its state is kept."""


def bound_output(shell: Any, limit: int) -> None:
    """Wraps ``sys.stdout.write`` and ``sys.stderr.write`` of the kernel in ``shell``."""
    written = [0]
    shell.events.register("pre_run_cell", lambda *_: written.__setitem__(0, 0))
    note = sys.stderr.write

    def bounded(write: Callable[[str], int]) -> Callable[[str], int]:
        def limited(text: str) -> int:
            before = written[0]
            written[0] += len(text)
            if written[0] <= limit:
                return write(text)
            if before <= limit:
                write(text[: limit - before])
                note(f"\n[sandgate: output truncated after {limit} bytes]\n")
            raise OutputLimitExceeded(
                f"the cell wrote more than {limit} bytes of output and was stopped; "
                "the context's state is kept"
            )

        return limited

    sys.stdout.write = bounded(sys.stdout.write)  # type: ignore[method-assign]
    sys.stderr.write = bounded(sys.stderr.write)  # type: ignore[method-assign]
