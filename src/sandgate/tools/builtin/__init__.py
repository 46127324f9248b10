"""Tools shipped with Sandgate: ``kv``, ``http_fetch`` and ``workflow_run``."""

from sandgate.tools.builtin import http_fetch, kv, workflow_run

__all__ = ["http_fetch", "kv", "workflow_run"]
