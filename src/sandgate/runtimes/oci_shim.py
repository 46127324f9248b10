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
2. The sandbox joins the user namespace of its uid slot, which the gateway made as the range's
   first host uid (its maps ``0 <base> 65536``, nested namespaces locked: ``_idmap``) and
   bind-mounted into the stage: the namespace's owner is the sandbox's own host uid, not root,
   so per-user kernel counts (inotify, ...) charged to the owner are the sandbox's own, as
   under bubblewrap.
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
5. The shim becomes ``runc create`` (``exec``): its exit status is runc's.

Trust: the shim runs as root, called by containerd with a bundle the engine wrote from
Sandgate's request; the stage it reads is root-only. It trusts nothing inside the container.
"""

from __future__ import annotations

# Start-up time is part of every Docker sandbox's create: only cheap modules here (no
# subprocess, pathlib, socket.py or json; ``_socket`` is the C module behind socket.py, and
# ``_json`` the one behind json, whose own import of ``re`` and ``enum`` costs ~6 ms a create).
import _socket
import os
import resource
import sys

TYPE_CHECKING = False  # typing costs ~10 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

__all__ = ["STAGE_DIR", "apply_rlimits", "bind_listener", "main", "patch_config", "report"]

STAGE_DIR = "/run/sandgate-rt/stage"
GUEST_DIR = "/run/sandgate"
LISTEN_FD = 3
#: runc's global flags that take a value (the subcommand follows them).
_VALUE_FLAGS = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})
_DOCKER_FILES = frozenset({"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"})
_STAGED_FLAGS = {GUEST_DIR: ("ro", "nosuid", "nodev"), "/dev/pts": ("nosuid", "noexec")}
#: The flags of a team volume's staged bind (``<stage>/volumes/<n>``).
_VOLUME_FLAGS = ("nosuid", "nodev")


class _JsonContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _json_codec() -> tuple[Callable[[bytes], Any], Callable[[object], str]]:
    """``json.loads`` and ``json.dumps`` (same results, same bytes) from ``_json`` alone; the
    ``json`` module itself where the accelerator is missing or not as expected."""
    try:
        from _json import encode_basestring_ascii, make_encoder, make_scanner

        scan = make_scanner(_JsonContext())  # type: ignore[arg-type]  # typeshed: a scanner
        encode = make_encoder(  # markers, default, encoder, indent, separators, sort, skip, nan
            None, _unserializable, encode_basestring_ascii, None, ": ", ", ", False, False, True
        )
        # A private API: an interpreter whose calls differ must fail here, not in a create.
        probe = '{"probe": [0, 0.5, null, true, "x"]}'
        if "".join(encode(scan(probe, 0)[0], 0)) != probe:
            raise TypeError("_json behaves differently")
    except (ImportError, TypeError, ValueError, StopIteration):
        import json

        return json.loads, json.dumps

    def loads(data: bytes) -> Any:
        text = data.decode("utf-8").strip(" \t\n\r")
        try:
            value, end = scan(text, 0)
        except StopIteration:
            raise ValueError("not a JSON document") from None
        if end != len(text):
            raise ValueError("extra data after the JSON document")
        return value

    def dumps(value: object) -> str:
        return "".join(encode(value, 0))

    return loads, dumps


loads, dumps = _json_codec()


class ShimError(Exception):
    """A refusal: written to runc's log (which the engine reads and shows to the caller) and
    to stderr, with exit status 1."""


def bind_listener(path: str) -> int:
    """The fd (not inheritable) of a listening Unix socket at ``path`` that only root can
    connect to (mode 0600)."""
    try:  # noqa: SIM105 - contextlib would cost every create its import
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    # Linux gives the socket file the socket inode's mode (minus the umask) at bind, so it
    # never exists with a wider one. Not ``os.umask``: the umask is the whole process's, and
    # the gateway binds from worker threads while others create the files sandboxes read.
    os.fchmod(listener.fileno(), 0o600)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(256)
    return int(listener.detach())


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
    volumes = os.path.join(os.path.dirname(str(info["root"])), "volumes") + "/"
    for mount in config.get("mounts") or []:
        destination = mount.get("destination")
        if destination in _DOCKER_FILES:
            continue
        flags = _STAGED_FLAGS.get(destination)
        if flags is None and str(mount.get("source", "")).startswith(volumes):
            flags = _VOLUME_FLAGS
        if flags is not None:
            # The staged mounts carry these flags on the host, and a user namespace may only
            # remount them with the same (locked) flags; say so to runc.
            options = list(mount.get("options") or [])
            options += [o for o in flags if o not in options]
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
        wanted = (int(limit["soft"]), int(limit["hard"]))
        try:
            resource.setrlimit(number, wanted)
        except (ValueError, OSError) as exc:
            held = resource.getrlimit(number)[1]
            raise ShimError(
                f"sandgate runtime: cannot set the sandbox's {name} to {wanted[1]} ({exc}; the "
                f"engine's own hard limit is {held}): lower the Sandgate limit (limits.nofile "
                "for RLIMIT_NOFILE) or raise the engine's (LimitNOFILE= of containerd and dockerd)"
            ) from None


def _stage_of(config: dict[str, Any]) -> dict[str, Any]:
    for mount in config.get("mounts") or []:
        if mount.get("destination") != GUEST_DIR:
            continue
        stage, name = os.path.split(str(mount.get("source", "")))
        parent, sandbox_id = os.path.split(stage)
        if name != "run" or parent != STAGE_DIR:
            break
        try:
            with open(os.path.join(stage, "stage.json"), "rb") as file:
                info = loads(file.read())
        except (OSError, ValueError):
            raise ShimError(f"sandgate runtime: no stage for {sandbox_id}") from None
        if not isinstance(info, dict) or info.get("sandbox_id") != sandbox_id:
            raise ShimError(f"sandgate runtime: the stage of {sandbox_id} is inconsistent")
        return info
    raise ShimError(
        "sandgate runtime: this container is not a Sandgate sandbox (no staged /run/sandgate "
        "mount); use another runtime for it"
    )


def _create(runc: str, args: list[str], index: int) -> NoReturn:
    """Prepares the sandbox, then becomes ``runc create`` (raises ``ShimError`` before)."""
    options = args[index + 1 :]
    if any(a == "--preserve-fds" or a.startswith("--preserve-fds=") for a in options):
        raise ShimError("sandgate runtime: --preserve-fds is not supported for sandboxes")
    bundle = "."
    for position, arg in enumerate(options):
        if arg in ("--bundle", "-b") and position + 1 < len(options):
            bundle = options[position + 1]
        elif arg.startswith("--bundle="):
            bundle = arg.split("=", 1)[1]
    config_path = os.path.join(bundle, "config.json")
    with open(config_path, "rb") as file:
        config = loads(file.read())
    info = _stage_of(config)
    userns = info.get("userns")
    if not isinstance(userns, str) or not userns.startswith(STAGE_DIR + "/"):
        raise ShimError("sandgate runtime: the stage has no user namespace for the sandbox")
    patched = patch_config(config, info=info, userns_path=userns)
    apply_rlimits(config)
    temp = os.path.join(bundle, ".config.json.sandgate")
    with open(temp, "w") as file:
        file.write(dumps(patched))
    os.replace(temp, config_path)
    # fd 3 must be free for the listener: hold it with /dev/null until then.
    placeholder = os.open(os.devnull, os.O_RDONLY)
    if placeholder != LISTEN_FD:
        os.dup2(placeholder, LISTEN_FD, inheritable=False)
        os.close(placeholder)
    listener = bind_listener(os.path.join(str(info["host_dir"]), "guest.sock"))
    os.dup2(listener, LISTEN_FD, inheritable=True)
    os.close(listener)
    argv = [runc, *args[: index + 1], "--preserve-fds", "1", *options]
    os.execv(runc, argv)  # noqa: S606 - runc's own arguments, no shell


def report(args: list[str], message: str) -> None:
    """Writes ``message`` where runc writes its errors (its ``--log`` file, as JSON with
    ``--log-format json``), so the engine shows it instead of "unable to retrieve OCI runtime
    error"; and to stderr. Never raises: a refusal must not become a different error."""
    print(message, file=sys.stderr)
    found = subcommand(args)
    globals_ = args[: found[0]] if found is not None else args
    log_path, log_format = None, "text"
    for position, arg in enumerate(globals_):
        value = globals_[position + 1] if position + 1 < len(globals_) else None
        if arg == "--log" and value is not None:
            log_path = value
        elif arg.startswith("--log="):
            log_path = arg.split("=", 1)[1]
        elif arg == "--log-format" and value is not None:
            log_format = value
        elif arg.startswith("--log-format="):
            log_format = arg.split("=", 1)[1]
    if not log_path:
        return
    if log_format == "json":
        line = dumps({"level": "error", "msg": message})
    else:
        line = f"level=error msg={dumps(message)}"
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


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
        _create(runc, argv, found[0])
    except ShimError as exc:
        report(argv, str(exc))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report(argv, f"sandgate runtime: cannot prepare the sandbox: {exc}")
    sys.exit(1)


if __name__ == "__main__":
    main()
