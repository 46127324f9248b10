"""One JSON line per event on stderr; the guest logs sparingly (start, failures, drops)."""

from __future__ import annotations

import os
import sys
import time

from ._lean import dumps

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["log"]


def log(event: str, **fields: Any) -> None:
    record = {"ts": round(time.time(), 3), "pid": os.getpid(), "event": event, **fields}
    try:
        sys.stderr.write(dumps(record, default=str) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
