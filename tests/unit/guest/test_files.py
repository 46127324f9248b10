"""File operations through the real daemon and its per-user workers."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from sandgate.guest._files import TempFlags, temp_flags
from sandgate.guest._inotify import published
from sandgate.guest.client import FsEvent, GuestError

from .conftest import RunningGuest
from .helpers import eventually, run

pytestmark = pytest.mark.timeout(60)


def _code(exc: pytest.ExceptionInfo[GuestError]) -> str:
    return exc.value.connect


def test_write_read_round_trip_binary(guest: RunningGuest, workdir: Path) -> None:
    payload = os.urandom(5 * 1024 * 1024 + 123)
    target = workdir / "deep" / "er" / "blob.bin"

    async def body() -> None:
        entry = await guest.client.write_file(str(target), payload)
        assert (entry.path, entry.name, entry.type, entry.size) == (
            str(target),
            "blob.bin",
            "file",
            len(payload),
        )
        reader = await guest.client.read_file(str(target))
        assert (reader.size, reader.name, reader.offset, reader.length) == (
            len(payload),
            "blob.bin",
            0,
            len(payload),
        )
        chunks = [chunk async for chunk in reader]
        assert max(len(c) for c in chunks) <= 1024 * 1024
        assert b"".join(chunks) == payload
        part = await guest.client.read_file(str(target), offset=1000, length=5000)
        assert (part.offset, part.length) == (1000, 5000)
        assert await part.read_all() == payload[1000:6000]

    run(body())
    assert target.read_bytes() == payload
    assert [p.name for p in target.parent.iterdir()] == ["blob.bin"]  # no temp left


def test_write_streams_async_chunks_and_replaces(guest: RunningGuest, workdir: Path) -> None:
    target = workdir / "f.txt"
    target.write_text("old content that is longer")
    os.chmod(target, 0o640)

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"new ", b"content"):
            yield part

    entry = run(guest.client.write_file(str(target), chunks()))
    assert target.read_bytes() == b"new content"
    assert entry.size == 11
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # mode of the replaced file is kept


def test_write_through_symlink_writes_target(guest: RunningGuest, workdir: Path) -> None:
    (workdir / "real.txt").write_text("a")
    (workdir / "link.txt").symlink_to(workdir / "real.txt")
    run(guest.client.write_file(str(workdir / "link.txt"), b"b"))
    assert (workdir / "link.txt").is_symlink()
    assert (workdir / "real.txt").read_text() == "b"


def test_write_onto_directory_is_invalid(guest: RunningGuest, workdir: Path) -> None:
    with pytest.raises(GuestError) as info:
        run(guest.client.write_file(str(workdir), b"x" * (3 * 1024 * 1024)))
    assert _code(info) == "invalid_argument"


def test_abandoned_upload_leaves_target_untouched(guest: RunningGuest, workdir: Path) -> None:
    target = workdir / "keep.txt"
    target.write_text("original")
    sent = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"partial data"
        sent.set()
        await asyncio.Event().wait()  # never finishes: the upload is cancelled
        yield b""

    async def body() -> None:
        task = asyncio.ensure_future(guest.client.write_file(str(target), stalled()))
        await sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        async def clean() -> bool:
            return [e.name for e in await guest.client.list_dir(str(workdir))] == ["keep.txt"]

        assert await eventually(clean)

    run(body())
    assert target.read_text() == "original"


def test_stat_fields(guest: RunningGuest, workdir: Path) -> None:
    f = workdir / "data.txt"
    f.write_bytes(b"12345")
    os.chmod(f, 0o640)
    os.utime(f, (1_700_000_000, 1_700_000_000.5))
    (workdir / "sub").mkdir()
    (workdir / "link").symlink_to("data.txt")
    (workdir / "broken").symlink_to("missing")

    async def body() -> None:
        entry = await guest.client.stat(str(f))
        assert (entry.name, entry.type, entry.path, entry.size) == ("data.txt", "file", str(f), 5)
        assert (entry.mode, entry.permissions) == (0o640, "-rw-r-----")
        assert (entry.owner, entry.group) == ("root", "root")
        assert entry.modified_time == pytest.approx(1_700_000_000.5)
        assert entry.symlink_target is None and entry.metadata == {}
        sub = await guest.client.stat(str(workdir / "sub"))
        assert (sub.type, sub.permissions, sub.mode) == ("dir", "drwxr-xr-x", 0o755)
        link = await guest.client.stat(str(workdir / "link"))
        assert (link.type, link.mode, link.symlink_target) == ("file", 0o640, str(f))
        assert link.permissions == "Lrwxrwxrwx"
        broken = await guest.client.stat(str(workdir / "broken"))
        assert broken.type == "unspecified"
        with pytest.raises(GuestError) as info:
            await guest.client.stat(str(workdir / "absent"))
        assert _code(info) == "not_found"

    run(body())


def test_path_rules(guest: RunningGuest) -> None:
    async def body() -> None:
        assert (await guest.client.stat("")).path == "/root"
        assert (await guest.client.stat("~")).path == "/root"
        name = f"sg-path-test-{os.getpid()}"
        try:
            entry = await guest.client.write_file(name, b"rel")
            assert entry.path == f"/root/{name}"
            assert (await guest.client.stat(f"~/{name}")).path == f"/root/{name}"
        finally:
            await guest.client.remove(f"/root/{name}")
        for bad in ("/tmp/a\x00b", "/" + "a" * 4100):
            with pytest.raises(GuestError) as info:
                await guest.client.stat(bad)
            assert _code(info) == "invalid_argument"

    run(body())


def test_list_dir_order_and_depth(guest: RunningGuest, workdir: Path) -> None:
    for d in ("b", "a/y", "c"):
        (workdir / d).mkdir(parents=True)
    for f in ("a/x", "a/y/z", "b/w", "0.txt"):
        (workdir / f).write_text(f)
    base = str(workdir)

    def rel(entries: list) -> list[str]:  # type: ignore[type-arg]
        return [e.path[len(base) + 1 :] for e in entries]

    async def body() -> None:
        assert rel(await guest.client.list_dir(base)) == ["0.txt", "a", "b", "c"]
        assert rel(await guest.client.list_dir(base, depth=2)) == [
            "0.txt",
            "a",
            "a/x",
            "a/y",
            "b",
            "b/w",
            "c",
        ]
        assert rel(await guest.client.list_dir(base, depth=3)) == [
            "0.txt",
            "a",
            "a/x",
            "a/y",
            "a/y/z",
            "b",
            "b/w",
            "c",
        ]
        with pytest.raises(GuestError) as info:
            await guest.client.list_dir(base + "/0.txt")
        assert _code(info) == "invalid_argument"
        with pytest.raises(GuestError) as info:
            await guest.client.list_dir(base + "/absent")
        assert _code(info) == "not_found"

    run(body())


def test_list_dir_large_is_split_across_frames(guest: RunningGuest, workdir: Path) -> None:
    for i in range(4500):
        (workdir / f"f{i:05d}").touch()
    entries = run(guest.client.list_dir(str(workdir)))
    assert [e.name for e in entries] == [f"f{i:05d}" for i in range(4500)]


def test_make_dir(guest: RunningGuest, workdir: Path) -> None:
    async def body() -> None:
        entry = await guest.client.make_dir(str(workdir / "p" / "q"))
        assert (entry.type, entry.name) == ("dir", "q")
        with pytest.raises(GuestError) as info:
            await guest.client.make_dir(str(workdir / "p" / "q"))
        assert _code(info) == "already_exists"
        (workdir / "file").write_text("x")
        with pytest.raises(GuestError) as info:
            await guest.client.make_dir(str(workdir / "file"))
        assert _code(info) == "invalid_argument"

    run(body())
    assert (workdir / "p" / "q").is_dir()


def test_move_and_remove(guest: RunningGuest, workdir: Path) -> None:
    (workdir / "src.txt").write_text("moved")
    (workdir / "tree" / "inner").mkdir(parents=True)
    (workdir / "tree" / "inner" / "f").write_text("x")

    async def body() -> None:
        entry = await guest.client.move(str(workdir / "src.txt"), str(workdir / "new" / "dst.txt"))
        assert (entry.path, entry.size) == (str(workdir / "new" / "dst.txt"), 5)
        with pytest.raises(GuestError) as info:
            await guest.client.move(str(workdir / "src.txt"), str(workdir / "other"))
        assert _code(info) == "not_found"
        await guest.client.remove(str(workdir / "tree"))
        await guest.client.remove(str(workdir / "tree"))  # missing is fine

    run(body())
    assert (workdir / "new" / "dst.txt").read_text() == "moved"
    assert not (workdir / "src.txt").exists()
    assert not (workdir / "tree").exists()


def test_metadata_xattrs(guest: RunningGuest, workdir: Path) -> None:
    target = workdir / "meta.txt"

    async def body() -> None:
        entry = await guest.client.write_file(
            str(target), b"m", metadata={"owner": "agent", "k": "v"}
        )
        assert entry.metadata == {"owner": "agent", "k": "v"}
        assert os.getxattr(target, "user.e2b.owner") == b"agent"
        os.setxattr(target, "user.other", b"kept-out")
        assert (await guest.client.stat(str(target))).metadata == {"owner": "agent", "k": "v"}
        listed = await guest.client.list_dir(str(workdir))
        assert listed[0].metadata == {"owner": "agent", "k": "v"}
        moved = await guest.client.move(str(target), str(workdir / "moved.txt"))
        assert moved.metadata == {"owner": "agent", "k": "v"}
        # Every upload replaces the whole set.
        entry = await guest.client.write_file(
            str(workdir / "moved.txt"), b"m2", metadata={"n": "1"}
        )
        assert entry.metadata == {"n": "1"}
        entry = await guest.client.write_file(str(workdir / "moved.txt"), b"m3")
        assert entry.metadata == {}

    run(body())


@pytest.mark.timeout(10)
def test_special_files_are_refused_promptly(guest: RunningGuest, workdir: Path) -> None:
    fifo = workdir / "pipe"
    os.mkfifo(fifo)

    async def body() -> None:
        for path, code in (
            (str(fifo), "invalid_argument"),
            ("/dev/zero", "invalid_argument"),
            ("/proc/self/mem", "invalid_argument"),
            (str(workdir), "invalid_argument"),
            (str(workdir / "absent"), "not_found"),
        ):
            with pytest.raises(GuestError) as info:
                await guest.client.read_file(path)
            assert _code(info) == code, path
        with pytest.raises(GuestError) as info:
            await guest.client.write_file(str(fifo), b"x")
        assert _code(info) == "invalid_argument"

    started = time.monotonic()
    run(body())
    assert time.monotonic() - started < 5


@pytest.mark.timeout(20)
def test_kernel_files_are_read_to_their_end(guest: RunningGuest) -> None:
    """procfs and sysfs files report no useful size (0; 4096 for any sysfs attribute): they
    are read whole, then sent with the size read. Ranges apply to what was read."""
    boot_id_path = "/proc/sys/kernel/random/boot_id"
    mtu = Path("/sys/class/net/lo/mtu")
    assert mtu.stat().st_size == 4096 and len(mtu.read_bytes()) < 4096  # what makes it hard

    async def body() -> None:
        boot_id = Path(boot_id_path).read_bytes()
        reader = await guest.client.read_file(boot_id_path)
        assert (reader.size, await reader.read_all()) == (len(boot_id), boot_id)
        reader = await guest.client.read_file(str(mtu))
        assert (reader.size, await reader.read_all()) == (len(mtu.read_bytes()), mtu.read_bytes())
        reader = await guest.client.read_file(boot_id_path, offset=9, length=4)
        assert (reader.offset, reader.length, await reader.read_all()) == (9, 4, boot_id[9:13])
        reader = await guest.client.read_file(boot_id_path, offset=1000)
        assert (reader.size, reader.length, await reader.read_all()) == (len(boot_id), 0, b"")
        status = await (await guest.client.read_file("/proc/self/status")).read_all()
        assert status.startswith(b"Name:") and b"\nUid:" in status
        # Not data at all: a clear refusal. Without end: refused at the cap, not streamed.
        with pytest.raises(GuestError) as info:
            await guest.client.read_file("/proc/self/mem")
        assert _code(info) == "invalid_argument" and "not serve" in info.value.message
        with pytest.raises(GuestError) as info:
            await guest.client.read_file("/proc/self/pagemap")
        assert (_code(info), info.value.reason) == ("invalid_argument", "too_large")
        assert "16 MiB" in info.value.message

    run(body())


def test_watch_reports_envds_events_for_each_kind_of_write(
    guest: RunningGuest, workdir: Path
) -> None:
    """Each write through the files API is reported as envd's in-place write: a new file is
    created, chowned (chmod) and written; an overwrite chowned and written; an empty new file
    gets no write; metadata set or cleared adds a chmod. The temp file never shows, and a
    sync returns only after every event of a write that returned."""

    async def body() -> None:
        stream = await guest.client.watch(str(workdir))
        assert stream.can_sync
        seen: list[FsEvent] = []

        async def pump() -> None:
            async for event in stream:
                seen.append(event)

        async def events_of(write: Awaitable[object]) -> list[tuple[str, str]]:
            await write
            assert await stream.sync()
            found = [(event.name, event.type) for event in seen]
            seen.clear()
            return found

        task = asyncio.create_task(pump())
        client, d = guest.client, str(workdir)
        try:
            assert await events_of(client.write_file(f"{d}/a", b"1")) == [
                ("a", "create"),
                ("a", "chmod"),
                ("a", "write"),
            ]
            assert await events_of(client.write_file(f"{d}/a", b"2")) == [
                ("a", "chmod"),
                ("a", "write"),
            ]
            assert await events_of(client.write_file(f"{d}/e", b"")) == [
                ("e", "create"),
                ("e", "chmod"),
            ]
            assert await events_of(client.write_file(f"{d}/e", b"")) == [
                ("e", "chmod"),
                ("e", "write"),
            ]
            assert await events_of(client.write_file(f"{d}/m", b"x", metadata={"k": "v"})) == [
                ("m", "create"),
                ("m", "chmod"),
                ("m", "write"),
                ("m", "chmod"),
            ]
            assert await events_of(client.write_file(f"{d}/m", b"y")) == [  # clears it
                ("m", "chmod"),
                ("m", "write"),
                ("m", "chmod"),
            ]

            async def two_files() -> None:
                async with await client.upload() as upload:
                    for name in ("x", "y"):
                        await upload.begin(f"{d}/{name}")
                        await upload.write(name.encode())
                        await upload.end()
                    await upload.commit()

            assert await events_of(two_files()) == [
                (name, kind) for name in ("x", "y") for kind in ("create", "chmod", "write")
            ]
            assert not [name for name in os.listdir(workdir) if ".sgtmp" in name]
        finally:
            task.cancel()
            await stream.aclose()

    run(body())


def test_temp_names_carry_what_the_watcher_reports() -> None:
    for flags, events in (
        (TempFlags(created=True), ["create", "chmod", "write"]),
        (TempFlags(created=True, empty=True), ["create", "chmod"]),
        (TempFlags(created=True, metadata=True), ["create", "chmod", "write", "chmod"]),
        (TempFlags(created=False), ["chmod", "write"]),
        (TempFlags(created=False, metadata=True), ["chmod", "write", "chmod"]),
    ):
        name = f".report.txt.0a1b2c{flags.suffix()}"
        assert temp_flags(name) == flags and temp_flags(f"/d/{name}") == flags
        assert published(flags) == events
    for other in ("report.txt.sgtmp-c", ".sgtmp-c", ".x.sgtmp-", ".x.sgtmp-q", ".x.sgtmp-cx"):
        assert temp_flags(other) is None, other


def test_watch_events(guest: RunningGuest, workdir: Path) -> None:
    async def next_events(stream, wanted: set[FsEvent]) -> set[FsEvent]:  # type: ignore[no-untyped-def]
        seen: set[FsEvent] = set()
        async for event in stream:
            seen.add(event)
            if wanted <= seen:
                return seen
        raise AssertionError(f"watch ended; saw {seen}")

    async def body() -> None:
        stream = await guest.client.watch(str(workdir), recursive=True)
        async with stream:
            await guest.client.make_dir(str(workdir / "sub"))
            await next_events(stream, {FsEvent("sub", "create")})
            await guest.client.write_file(str(workdir / "sub" / "f.txt"), b"1")
            seen = await next_events(
                stream, {FsEvent("sub/f.txt", "create"), FsEvent("sub/f.txt", "write")}
            )
            assert not [e for e in seen if ".sgtmp" in e.name]  # temp files stay hidden
            await guest.client.write_file(str(workdir / "sub" / "f.txt"), b"2")
            await next_events(stream, {FsEvent("sub/f.txt", "write")})
            os.chmod(workdir / "sub" / "f.txt", 0o600)
            await next_events(stream, {FsEvent("sub/f.txt", "chmod")})
            await guest.client.move(str(workdir / "sub" / "f.txt"), str(workdir / "g.txt"))
            await next_events(stream, {FsEvent("sub/f.txt", "rename"), FsEvent("g.txt", "create")})
            await guest.client.remove(str(workdir / "g.txt"))
            await next_events(stream, {FsEvent("g.txt", "remove")})

        flat = await guest.client.watch(str(workdir), recursive=False)
        async with flat:
            (workdir / "sub" / "hidden").write_text("not reported")
            (workdir / "top").write_text("reported")
            event = await anext(flat)
            assert event == FsEvent("top", "create")

        with pytest.raises(GuestError) as info:
            await guest.client.watch(str(workdir / "absent"))
        assert _code(info) == "not_found"
        with pytest.raises(GuestError) as info:
            await guest.client.watch(str(workdir / "top"))
        assert _code(info) == "invalid_argument"

    run(body())
