"""``kv``: a small persistent key-value store (SQLite under ``$SANDGATE_HOME/tools/kv.db``).

Values are any JSON. Operations: ``get`` (the value or null), ``set``, ``list`` (keys with a
prefix), ``delete``. One store per installation: which agent may read or write which keys is
the policy's business (``action`` is ``op``; conditions on ``key`` select key ranges).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from functools import partial
from pathlib import Path
from typing import Any

from sandgate._serial import SerialWorker
from sandgate.errors import InvalidArguments
from sandgate.tools.tool import ToolContext

DESCRIPTION = "Persistent key-value store: get, set, list and delete JSON values by key."
ACTION = "op"
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "op": {
            "type": "string",
            "enum": ["get", "set", "list", "delete"],
            "description": "The operation.",
        },
        "key": {"type": "string", "minLength": 1, "maxLength": 512, "description": "The key."},
        "value": {"description": "The JSON value to store (set)."},
        "prefix": {"type": "string", "default": "", "description": "Key prefix (list)."},
    },
    "required": ["op"],
    "additionalProperties": False,
}
IDEMPOTENT = False
_LIST_LIMIT = 10_000


class KvExecutor:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        #: Every operation runs on this one thread (the connection is used by one at a time
        #: anyway), off the event loop.
        self._worker = SerialWorker("sandgate-kv")

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return await self._worker.run(partial(self._run, arguments))

    def _run(self, arguments: dict[str, Any]) -> Any:
        op = arguments["op"]
        key = arguments.get("key")
        if op != "list" and key is None:
            raise InvalidArguments(f"kv: argument 'key' is required for {op}")
        with self._lock:
            db = self._connect()
            if op == "get":
                row = db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
                return None if row is None else json.loads(row[0])
            if op == "set":
                if "value" not in arguments:
                    raise InvalidArguments("kv: argument 'value' is required for set")
                with db:
                    db.execute(
                        "INSERT INTO kv(key, value) VALUES(?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, json.dumps(arguments["value"])),
                    )
                return {"key": key, "stored": True}
            if op == "delete":
                with db:
                    deleted = db.execute("DELETE FROM kv WHERE key = ?", (key,)).rowcount
                return {"key": key, "deleted": deleted > 0}
            prefix = arguments.get("prefix", "")
            rows = db.execute(
                "SELECT key FROM kv WHERE substr(key, 1, ?) = ? ORDER BY key LIMIT ?",
                (len(prefix), prefix, _LIST_LIMIT),
            ).fetchall()
            return [row[0] for row in rows]

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(self._path, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT)")
        return self._db
