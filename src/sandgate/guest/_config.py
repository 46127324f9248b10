"""The guest's configuration file, written by the host before the daemon starts."""

from __future__ import annotations

import os

from sandgate.strictjson import loads

TYPE_CHECKING = False  # not typing's: the guest's start never imports typing (see _loop)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["GuestConfig"]


class GuestConfig:
    """Sandbox-level settings; a missing key takes the default shown here. Never changed once
    made (``configure`` builds a new one); build it with :meth:`from_json`. A plain class, not a
    dataclass: ``dataclasses`` would cost every guest's start the import of ``inspect``,
    ``ast`` and ``dis`` (~7 ms), and ``typing`` is kept out of it too (``_loop``)."""

    __slots__ = (
        "default_user", "default_workdir", "egress_proxy_port", "envs", "exit_retention_s",
        "max_processes", "sudo", "worker_idle_s",
    )  # fmt: skip

    def __init__(
        self,
        envs: dict[str, str],
        default_user: str = "user",
        default_workdir: str | None = None,
        max_processes: int = 256,
        exit_retention_s: float = 30.0,
        egress_proxy_port: int = 0,
        sudo: bool = True,
        worker_idle_s: float = 30.0,
    ) -> None:
        self.envs = envs
        self.default_user = default_user
        self.default_workdir = default_workdir
        self.max_processes = max_processes
        self.exit_retention_s = exit_retention_s
        #: Port of the egress relay on 127.0.0.1 (``_egress``); 0 runs no relay.
        self.egress_proxy_port = egress_proxy_port
        #: Whether ``sudo`` inside the sandbox may run commands as root (``_sudo``).
        self.sudo = sudo
        #: Seconds without a file operation after which a user's file worker exits (the next
        #: one starts it again, ~10 ms), so an idle sandbox holds one process.
        self.worker_idle_s = worker_idle_s

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GuestConfig:
        envs = data.get("envs") or {}
        if not isinstance(envs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in envs.items()
        ):
            raise ValueError("config: envs must map strings to strings")
        user = data.get("default_user") or "user"
        workdir = data.get("default_workdir") or None
        max_processes = data.get("max_processes", 256)
        retention = data.get("exit_retention_s", 30)
        if not isinstance(user, str) or not (workdir is None or isinstance(workdir, str)):
            raise ValueError("config: default_user and default_workdir must be strings")
        if not isinstance(max_processes, int) or max_processes < 1:
            raise ValueError("config: max_processes must be a positive integer")
        if not isinstance(retention, int | float) or retention < 0:
            raise ValueError("config: exit_retention_s must be a non-negative number")
        proxy_port = data.get("egress_proxy_port", 0)
        if not isinstance(proxy_port, int) or isinstance(proxy_port, bool):
            raise ValueError("config: egress_proxy_port must be an integer")
        if not 0 <= proxy_port < 65536:
            raise ValueError("config: egress_proxy_port must be in 0..65535")
        sudo = data.get("sudo", True)
        if not isinstance(sudo, bool):
            raise ValueError("config: sudo must be true or false")
        idle = data.get("worker_idle_s", 30)
        if not isinstance(idle, int | float) or isinstance(idle, bool) or not 0 < idle <= 86400:
            raise ValueError("config: worker_idle_s must be a number of seconds in (0, 86400]")
        return cls(
            dict(envs), user, workdir, max_processes, float(retention), proxy_port, sudo,
            float(idle),
        )  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        return {
            "envs": dict(self.envs),
            "default_user": self.default_user,
            "default_workdir": self.default_workdir,
            "max_processes": self.max_processes,
            "exit_retention_s": self.exit_retention_s,
            "egress_proxy_port": self.egress_proxy_port,
            "sudo": self.sudo,
            "worker_idle_s": self.worker_idle_s,
        }

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> GuestConfig:
        with open(path, "rb") as file:
            data = loads(file.read(), allow_surrogates=True)
        if not isinstance(data, dict):
            raise ValueError("config: top level must be an object")
        return cls.from_json(data)
