"""Saved sandbox disks: E2B snapshots, sandboxes paused to disk, fork captures.

What a save is: the sandbox's writable layer (every file it wrote, deleted or changed over its
template, ``runtimes._layer``) plus what is needed to boot a sandbox over it again: the
template and its exact image, the CPU and memory, and the environment variables the sandbox
was created with. Running processes and memory are **not** saved: a sandbox made from a save
boots fresh, as after ``pause(keep_memory=False)``.

On disk, under ``$SANDGATE_HOME`` (root only)::

    snapshots/<id>/layer.tar   the layer archive (owners relative to the sandbox's uid range)
    snapshots/<id>/envs.json   the creating call's envVars, restored into sandboxes made from it
    snapshots/.partial-<id>/   a save in progress: renamed to <id>/ once written and fsynced
    sandbox-envs/<sandbox id>.json  each kept sandbox's envVars (what a save of it carries)

Accounting: every save's size (its estimate while it is written) counts against its team's
``limits.max_snapshot_mib_per_team``; deleting a snapshot, resuming or killing a sandbox paused
to disk, and the end of a fork give it back. Names are the E2B ones: a snapshot is
``<id>:default``, or ``<namespace>/<name>:<tag>`` when named (the namespace is the team's
name); a second save under a name replaces the first.

Crash safety: the row is written (``saving``) before the files and marked ``ready`` after they
are complete, so :meth:`SnapshotService.recover` at start removes every half-written save, every
fork capture and every file without a ready row; nothing is lost that was acknowledged.

Trust: the archive's contents are the sandbox's (hostile); see ``runtimes._layer`` for how
they are read and restored. Teams see and touch only their own saves; another team's snapshot
is reported exactly like one that does not exist.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

from sandgate._atomic import write_atomic
from sandgate.config import Config
from sandgate.errors import DiskFull, InvalidRequest, QuotaExceeded, SnapshotDamaged
from sandgate.runtimes import Runtime
from sandgate.sandboxes.state import SnapshotKind, SnapshotState
from sandgate.store import Sandbox, Snapshot, SnapshotRecords, Store

__all__ = ["DEFAULT_TAG", "SnapshotName", "SnapshotService"]

log = structlog.get_logger("sandgate.snapshots")

DEFAULT_TAG = "default"
_LAYER = "layer.tar"
_ENVS = "envs.json"
_PARTIAL = ".partial-"
_MIB = 1024 * 1024
#: Kept free on the gateway's disk beyond a save's estimate.
_HOST_MARGIN = 64 * _MIB
_ID_ALPHABET = string.ascii_lowercase + string.digits
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_TAG = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class SnapshotName:
    """A snapshot's name and tag (``my-snapshot``, ``my-snapshot:v2``)."""

    name: str
    tag: str = DEFAULT_TAG

    @classmethod
    def parse(cls, text: str) -> SnapshotName:
        """Raises ``InvalidRequest`` saying what a name may be."""
        name, _, tag = text.partition(":")
        tag = tag or DEFAULT_TAG
        if not _NAME.fullmatch(name) or not _TAG.fullmatch(tag):
            raise InvalidRequest(
                f"invalid snapshot name {text[:100]!r}: use lowercase letters, digits, '-' and "
                "'_' (up to 63, starting with a letter or digit), optionally ':<tag>'"
            )
        return cls(name, tag)


class SnapshotService:
    """Owns ``$SANDGATE_HOME/snapshots``: saves, lists, resolves, deletes and accounts."""

    def __init__(self, config: Config, store: Store, runtime: Runtime) -> None:
        self._root = config.home_dir / "snapshots"
        self._envs_root = config.home_dir / "sandbox-envs"
        self._limits = config.limits
        self._store = store
        self._records = SnapshotRecords(store)
        self._runtime = runtime
        self._admission = asyncio.Lock()

    # -- what a sandbox was created with ------------------------------------------------------

    def remember_envs(self, sandbox_id: str, envs: Mapping[str, str]) -> None:
        """Keeps the creating call's envVars, which saves of the sandbox carry. Not fsynced
        (every create writes one): a save copies them into its own, durable ``envs.json``."""
        self._envs_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps(dict(envs)).encode()
        _write_private(self._envs_root / f"{sandbox_id}.json", data, durable=False)

    def envs_of(self, sandbox_id: str) -> dict[str, str]:
        return _read_envs(self._envs_root / f"{sandbox_id}.json")

    def forget_envs(self, sandbox_id: str) -> None:
        (self._envs_root / f"{sandbox_id}.json").unlink(missing_ok=True)

    # -- saving -------------------------------------------------------------------------------

    async def save(
        self,
        row: Sandbox,
        kind: SnapshotKind,
        *,
        image_ref: str,
        name: SnapshotName | None = None,
        from_layer: Snapshot | None = None,
    ) -> Snapshot:
        """Saves the sandbox's layer: from the runtime (the sandbox must be frozen; the
        caller holds its lock) or, for a sandbox paused to disk, from its saved layer
        ``from_layer``. Raises ``QuotaExceeded`` (team's saved disks), ``DiskFull`` (the
        gateway's disk), ``RuntimeUnavailable``; on any failure nothing is left behind."""
        if from_layer is not None:
            estimate = from_layer.size_bytes
        else:
            estimate = await self._runtime.layer_in_use(row.id)
        snapshot = Snapshot(
            id=_new_id(),
            team_id=row.team_id,
            kind=kind.value,
            state=SnapshotState.SAVING.value,
            name=None,
            tag=None,
            source_sandbox_id=row.id,
            template_id=row.template_id,
            image_ref=image_ref,
            cpu_count=row.cpu_count,
            memory_mb=row.memory_mb,
            size_bytes=estimate,
            created_at=datetime.now(UTC),
        )
        async with self._admission:
            self._check_quota(row.team_id, estimate)
            await asyncio.to_thread(self._check_host_disk, estimate)
            self._records.add(snapshot)
        partial = self._root / f"{_PARTIAL}{snapshot.id}"
        try:
            envs = json.dumps(self.envs_of(row.id)).encode()
            await asyncio.to_thread(self._open_partial, partial, envs)
            if from_layer is not None:
                source = self.archive(from_layer)
                size = await asyncio.to_thread(_link_or_copy, source, partial / _LAYER)
            else:
                size = await self._runtime.save_layer(row.id, partial / _LAYER)
            await asyncio.to_thread(_commit, partial, self._root / snapshot.id)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, partial, True)
            self._records.delete(snapshot.id)
            raise
        total = size + len(envs)
        async with self._admission:
            replaced = (
                list(self._records.named(row.team_id, kind, name.name, name.tag))
                if name is not None
                else []
            )
            ready = self._records.update(
                snapshot.id,
                state=SnapshotState.READY.value,
                size_bytes=total,
                name=name.name if name else None,
                tag=name.tag if name else None,
            )
        for old in replaced:
            await self.remove(old)  # a name moves to its newest save, as on E2B
        if ready is None:
            raise SnapshotDamaged(f"snapshot {snapshot.id} vanished while it was saved")
        log.info("snapshot.saved", snapshot=snapshot.id, kind=kind.value, bytes=total)
        return ready

    def _check_quota(self, team_id: str, estimate: int) -> None:
        limit = self._limits.max_snapshot_mib_per_team * _MIB
        used = self._records.bytes_used(team_id)
        if used + estimate > limit:
            raise QuotaExceeded(
                f"saving this sandbox's disk (about {_mib(estimate)} MiB) would bring your "
                f"team's saved disks to {_mib(used + estimate)} MiB; the limit is "
                f"{self._limits.max_snapshot_mib_per_team} MiB "
                "(limits.max_snapshot_mib_per_team). Delete snapshots or kill paused sandboxes"
            )

    def _check_host_disk(self, estimate: int) -> None:
        self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
        free = shutil.disk_usage(self._root).free
        if free < estimate + _HOST_MARGIN:
            raise DiskFull(
                f"the gateway's disk has {_mib(free)} MiB free; saving this sandbox needs about "
                f"{_mib(estimate + _HOST_MARGIN)} MiB. Free space under {self._root}"
            )

    def _open_partial(self, partial: Path, envs: bytes) -> None:
        partial.mkdir(mode=0o700)
        _write_private(partial / _ENVS, envs)

    # -- reading ------------------------------------------------------------------------------

    def archive(self, snapshot: Snapshot) -> Path:
        return self._root / snapshot.id / _LAYER

    def envs_in(self, snapshot: Snapshot) -> dict[str, str]:
        return _read_envs(self._root / snapshot.id / _ENVS)

    def get(self, snapshot_id: str) -> Snapshot | None:
        return self._records.get(snapshot_id)

    def pause_layer(self, sandbox_id: str) -> Snapshot | None:
        """The saved layer of a sandbox paused to disk."""
        for snapshot in self._records.of_source(sandbox_id, SnapshotKind.PAUSE):
            if snapshot.state == SnapshotState.READY.value:
                return snapshot
        return None

    def resolve(self, team_id: str, ref: str) -> Snapshot | None:
        """The team's ready snapshot ``ref`` names, or None. Accepted: ``<id>``,
        ``<id>:default``, ``<name>``, ``<name>:<tag>``, and each with ``<namespace>/``."""
        namespace, slash, body = ref.rpartition("/")
        if slash and namespace != self.namespace(team_id):
            return None
        head, _, tag = body.partition(":")
        candidates = self._records.by_id_or_name(
            head, team_id, SnapshotKind.SNAPSHOT, tag or DEFAULT_TAG
        )
        by_id = next((c for c in candidates if c.id == head), None)
        if (
            by_id is not None
            and by_id.team_id == team_id
            and by_id.kind == SnapshotKind.SNAPSHOT.value
            and by_id.state == SnapshotState.READY.value
            and (not tag or tag == (by_id.tag or DEFAULT_TAG))
        ):
            return by_id
        for named in candidates:
            if (
                named.team_id == team_id
                and named.kind == SnapshotKind.SNAPSHOT.value
                and named.name == head
                and named.tag == (tag or DEFAULT_TAG)
                and named.state == SnapshotState.READY.value
            ):
                return named
        return None

    def page(
        self,
        team_id: str,
        *,
        sandbox_id: str | None,
        name: str | None,
        limit: int,
        next_token: str | None,
    ) -> tuple[list[Snapshot], str | None]:
        """The team's snapshots, newest first; ``name`` filters by id or name (optionally
        with namespace and tag)."""
        after = _parse_token(next_token) if next_token else None
        names: list[tuple[str | None, str | None]] | None = None
        ids: list[str] | None = None
        if name:
            namespace, slash, body = name.rpartition("/")
            if slash and namespace != self.namespace(team_id):
                return [], None
            head, _, tag = body.partition(":")
            names, ids = [(head, tag or None)], [head]
        found = self._records.page(
            team_id,
            SnapshotKind.SNAPSHOT,
            SnapshotState.READY,
            source_sandbox_id=sandbox_id,
            names=names,
            ids=ids,
            limit=limit,
            after=after,
        )
        return found.snapshots, found.next_token

    def namespace(self, team_id: str) -> str:
        """The team's namespace in snapshot names: its name, as a slug."""
        team = self._store.team(team_id)
        slug = re.sub(r"[^a-z0-9-]+", "-", (team.name if team else "").lower()).strip("-")
        return slug or team_id

    def describe(self, snapshot: Snapshot) -> tuple[str, list[str]]:
        """E2B's ``snapshotID`` and ``names`` of a snapshot."""
        if snapshot.name is None:
            return f"{snapshot.id}:{DEFAULT_TAG}", []
        full = f"{self.namespace(snapshot.team_id)}/{snapshot.name}:{snapshot.tag}"
        return full, [full]

    def bytes_used(self, team_id: str) -> int:
        return self._records.bytes_used(team_id)

    # -- removing -----------------------------------------------------------------------------

    async def delete(self, team_id: str, ref: str) -> bool:
        """Deletes the team's snapshot ``ref``; False when there is none. Sandboxes already
        made from it keep their files."""
        snapshot = self.resolve(team_id, ref)
        if snapshot is None:
            return False
        await self.remove(snapshot)
        log.info("snapshot.deleted", snapshot=snapshot.id)
        return True

    async def remove(self, snapshot: Snapshot) -> None:
        """Removes a save's files, then its row (its space is given back); idempotent. A
        restore reading it meanwhile keeps its open file."""
        await asyncio.to_thread(shutil.rmtree, self._root / snapshot.id, True)
        self._records.delete(snapshot.id)

    async def forget_sandbox(self, sandbox_id: str) -> None:
        """A sandbox is gone: its layer saved by a pause to disk and its envVars go too
        (snapshots of it stay)."""
        for snapshot in self._records.of_source(sandbox_id, SnapshotKind.PAUSE):
            await self.remove(snapshot)
        self.forget_envs(sandbox_id)

    async def recover(self) -> None:
        """At start: removes half-written saves, fork captures and files no ready row names,
        and the envVars of sandboxes that are gone."""
        ready: set[str] = set()
        for snapshot in self._records.all():
            if snapshot.state != SnapshotState.READY.value or snapshot.kind == SnapshotKind.FORK:
                log.info("snapshot.discarded", snapshot=snapshot.id, state=snapshot.state)
                await self.remove(snapshot)
            elif not self.archive(snapshot).is_file():
                log.error(
                    "snapshot.missing", snapshot=snapshot.id, path=str(self.archive(snapshot))
                )
                self._records.delete(snapshot.id)
            else:
                ready.add(snapshot.id)
        if self._root.is_dir():
            for entry in self._root.iterdir():
                if entry.name not in ready:
                    await asyncio.to_thread(shutil.rmtree, entry, True)
        if self._envs_root.is_dir():
            kept = {row.id for row in self._store.kept_sandboxes()}
            for entry in self._envs_root.iterdir():
                if entry.name.removesuffix(".json") not in kept:
                    entry.unlink(missing_ok=True)


def _new_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


def _mib(size: int) -> int:
    return -(-size // _MIB)


def _write_private(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Atomically makes ``path`` hold ``data`` (mode 0600); ``durable`` fsyncs it first."""
    write_atomic(path, data, mode=0o600, durable=durable)


def _read_envs(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        raise SnapshotDamaged(f"{path} is unreadable") from None
    if not isinstance(data, dict):
        raise SnapshotDamaged(f"{path} is not an object")
    return {str(k): str(v) for k, v in data.items()}


def _link_or_copy(source: Path, target: Path) -> int:
    """Another save of the same layer: a hard link (the files are immutable once written),
    or a copy across file systems."""
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise SnapshotDamaged(f"the saved layer {source} is missing") from None
    except OSError:
        shutil.copyfile(source, target)
        with open(target, "rb") as file:
            os.fsync(file.fileno())
    return target.stat().st_size


def _commit(partial: Path, final: Path) -> None:
    """Makes a complete save durable under its final name."""
    fd = os.open(partial, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(partial, final)
    fd = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse_token(token: str) -> tuple[datetime, str]:
    try:
        created, last_id = token.split("|", 1)
        return datetime.fromisoformat(created), last_id
    except ValueError:
        raise InvalidRequest("invalid nextToken: pass back the x-next-token header value") from None
