"""Sandgate's OCI runtime shim: how a Docker sandbox gets a user namespace of its own.

Docker (20.10 and later) can give containers user namespaces only daemon-wide
(``userns-remap``: one uid range for every container). Sandgate needs more: each sandbox's ids
in a range no other sandbox and no host user has, its root an unprivileged host uid, and its
root file system the per-sandbox copy-on-write layer that ``_stage`` built. So Docker sandboxes
run with ``--runtime sandgate``, a runtime registered in the engine's ``daemon.json`` whose
executable is a two-line shell script that passes every call straight to ``runc`` except
``create``, which it hands to this module (standalone, stdlib only) first. For a ``create``:

1. The container must be a Sandgate sandbox: its ``/run/sandgate`` bind mount comes from a
   stage directory (``/run/sandgate-rt/stage/<id>/run``) whose ``stage.json`` names that id and
   the sandbox's uid range. Anything else is refused: this runtime never runs a container
   weaker or differently than asked.
2. A helper process, running as the range's first host uid, creates the sandbox's user
   namespace; the shim (root) writes its uid and gid maps (``0 <base> 65536``) and the helper
   sets ``user.max_user_namespaces=0`` inside it. The namespace's owner is thus the sandbox's
   own host uid, not root: per-user kernel counts (inotify, ...) charged to the owner are the
   sandbox's own, as under bubblewrap.
3. ``config.json`` is rewritten: join that user namespace; the root is the staged overlay,
   writable; Docker's ``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf`` bind mounts of
   host files are dropped (the stage seeded the layer with its own); the
   ``net.ipv4.ping_group_range`` default (which names gids the namespace does not map) goes.
   The process's rlimits are applied to the shim itself instead, so ``runc`` and the container
   inherit them: runc would set them with ``prlimit`` on a process already in the sandbox's
   namespace, which needs ``CAP_SYS_RESOURCE`` (lowering one's own needs nothing).
4. The guest's listening socket is bound on the host at ``<host dir>/guest.sock`` (mode 0600,
   root: only the gateway can connect) and passed to the container as fd 3
   (``--preserve-fds 1``); the sandbox's view of its host directory stays read-only.
5. ``runc create`` runs; its exit status is the shim's.

Trust: the shim runs as root, called by containerd with a bundle the engine wrote from
Sandgate's request; the stage it reads is root-only. It trusts nothing inside the container.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["STAGE_DIR", "apply_rlimits", "bind_listener", "main", "patch_config"]

STAGE_DIR = Path("/run/sandgate-rt/stage")
GUEST_DIR = "/run/sandgate"
LISTEN_FD = 3
_CLONE_NEWUSER = 0x10000000
#: runc's global flags that take a value (the subcommand follows them).
_VALUE_FLAGS = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})
_DOCKER_FILES = frozenset({"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"})
_STAGED_FLAGS = {GUEST_DIR: ("ro", "nosuid", "nodev"), "/dev/pts": ("nosuid", "noexec")}


class ShimError(Exception):
    """A refusal: printed to stderr (the engine shows it to the caller) with exit status 1."""


def bind_listener(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` that only root can connect to (mode 0600)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(os.fspath(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(256)
    return listener


def subcommand(args: list[str]) -> tuple[int, str] | None:
    """The index and name of runc's subcommand in ``args``."""
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in _VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            return index, arg
    return None


def patch_config(
    config: dict[str, Any], *, info: dict[str, Any], userns_path: str
) -> dict[str, Any]:
    """The container's OCI config, rewritten as the module docstring says (pure)."""
    base, count = int(info["uid_base"]), int(info["uid_count"])
    mapping = [{"containerID": 0, "hostID": base, "size": count}]
    linux = dict(config.get("linux") or {})
    namespaces = [n for n in linux.get("namespaces") or [] if n.get("type") != "user"]
    namespaces.append({"type": "user", "path": userns_path})
    linux["namespaces"] = namespaces
    linux["uidMappings"] = mapping
    linux["gidMappings"] = mapping
    sysctl = dict(linux.get("sysctl") or {})
    sysctl.pop("net.ipv4.ping_group_range", None)
    linux["sysctl"] = sysctl
    mounts = []
    for mount in config.get("mounts") or []:
        destination = mount.get("destination")
        if destination in _DOCKER_FILES:
            continue
        if destination in _STAGED_FLAGS:
            # The staged mounts carry these flags on the host, and a user namespace may only
            # remount them with the same (locked) flags; say so to runc.
            options = list(mount.get("options") or [])
            options += [o for o in _STAGED_FLAGS[destination] if o not in options]
            mount = {**mount, "options": options}
        mounts.append(mount)
    process = {k: v for k, v in (config.get("process") or {}).items() if k != "rlimits"}
    return {
        **config,
        "process": process,
        "root": {"path": str(info["root"]), "readonly": False},
        "linux": linux,
        "mounts": mounts,
    }


def apply_rlimits(config: dict[str, Any]) -> None:
    """Sets the container's rlimits on this process (inherited by runc and the container)."""
    for limit in (config.get("process") or {}).get("rlimits") or []:
        name = str(limit.get("type", ""))
        number = getattr(resource, name, None)
        if not name.startswith("RLIMIT_") or not isinstance(number, int):
            raise ShimError(f"sandgate runtime: unknown rlimit {name!r}")
        resource.setrlimit(number, (int(limit["soft"]), int(limit["hard"])))


def _stage_of(config: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    for mount in config.get("mounts") or []:
        if mount.get("destination") != GUEST_DIR:
            continue
        source = Path(str(mount.get("source", "")))
        stage = source.parent
        if source.name != "run" or stage.parent != STAGE_DIR:
            break
        try:
            info = json.loads((stage / "stage.json").read_text())
        except (OSError, ValueError):
            raise ShimError(f"sandgate runtime: no stage for {stage.name}") from None
        if not isinstance(info, dict) or info.get("sandbox_id") != stage.name:
            raise ShimError(f"sandgate runtime: the stage of {stage.name} is inconsistent")
        return stage, info
    raise ShimError(
        "sandgate runtime: this container is not a Sandgate sandbox (no staged /run/sandgate "
        "mount); use another runtime for it"
    )


class _Holder:
    """A process that creates the sandbox's user namespace as the range's first uid."""

    def __init__(self, base: int, count: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - runs in the child
            status = 1
            try:
                os.close(self._to_child)
                os.close(self._from_child)
                os.setgroups([])
                os.setresgid(base, base, base)
                os.setresuid(base, base, base)
                if libc.unshare(_CLONE_NEWUSER) != 0:
                    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
                os.write(from_child_w, b"u")
                if os.read(to_child_r, 1) != b"m":
                    os._exit(1)
                # SECURITY: no nested user namespaces (ESC-05); seccomp refuses them too.
                with open("/proc/sys/user/max_user_namespaces", "w") as file:
                    file.write("0")
                os.write(from_child_w, b"s")
                os.read(to_child_r, 1)  # until the shim is done
                status = 0
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    os.write(2, f"sandgate runtime: user namespace helper: {exc}\n".encode())
            finally:
                os._exit(status)
        os.close(to_child_r)
        os.close(from_child_w)
        try:
            self._expect(b"u")
            mapping = f"0 {base} {count}\n"
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{self.pid}/{name}", "w") as file:
                    file.write(mapping)
            os.write(self._to_child, b"m")
            self._expect(b"s")
        except BaseException:
            self.close()
            raise

    @property
    def userns_path(self) -> str:
        return f"/proc/{self.pid}/ns/user"

    def _expect(self, token: bytes) -> None:
        if os.read(self._from_child, 1) != token:
            raise ShimError("sandgate runtime: the user namespace helper failed")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._to_child)
        with contextlib.suppress(OSError):
            os.close(self._from_child)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _create(runc: str, args: list[str], index: int) -> int:
    options = args[index + 1 :]
    if any(a == "--preserve-fds" or a.startswith("--preserve-fds=") for a in options):
        raise ShimError("sandgate runtime: --preserve-fds is not supported for sandboxes")
    bundle = "."
    for position, arg in enumerate(options):
        if arg in ("--bundle", "-b") and position + 1 < len(options):
            bundle = options[position + 1]
        elif arg.startswith("--bundle="):
            bundle = arg.split("=", 1)[1]
    config_path = Path(bundle) / "config.json"
    config = json.loads(config_path.read_text())
    _, info = _stage_of(config)
    # fd 3 must be free for the listener: hold it with /dev/null until then.
    placeholder = os.open(os.devnull, os.O_RDONLY)
    if placeholder != LISTEN_FD:
        os.dup2(placeholder, LISTEN_FD, inheritable=False)
        os.close(placeholder)
    holder = _Holder(int(info["uid_base"]), int(info["uid_count"]))
    try:
        patched = patch_config(config, info=info, userns_path=holder.userns_path)
        apply_rlimits(config)
        temp = config_path.with_name(".config.json.sandgate")
        temp.write_text(json.dumps(patched))
        temp.replace(config_path)
        listener = bind_listener(Path(str(info["host_dir"])) / "guest.sock")
        os.dup2(listener.fileno(), LISTEN_FD, inheritable=True)
        listener.close()
        command = [runc, *args[: index + 1], "--preserve-fds", "1", *options]
        return subprocess.call(command, pass_fds=(LISTEN_FD,))
    finally:
        holder.close()
        with contextlib.suppress(OSError):
            os.close(LISTEN_FD)


def main(argv: list[str] | None = None) -> None:
    """``oci_shim.py --runc PATH -- <runc arguments>``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    runc = "runc"
    if len(argv) >= 3 and argv[0] == "--runc" and argv[2] == "--":
        runc, argv = argv[1], argv[3:]
    found = subcommand(argv)
    if found is None or found[1] != "create":
        os.execvp(runc, [runc, *argv])  # noqa: S606 - runc's own arguments, no shell
    try:
        status = _create(runc, argv, found[0])
    except ShimError as exc:
        print(exc, file=sys.stderr)
        status = 1
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"sandgate runtime: cannot prepare the sandbox: {exc}", file=sys.stderr)
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
