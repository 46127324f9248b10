"""``write_files``: several files staged inside the sandbox and committed together, through the
real daemon and its per-user workers; and the errno → error mapping that makes a full disk one
condition whatever the kernel said."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sandgate.guest._errors import from_oserror
from sandgate.guest.client import GuestError
from sandgate.guest.protocol import DISK_FULL

from .conftest import RunningGuest
from .helpers import run

pytestmark = pytest.mark.timeout(60)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_write_files_commits_every_file_at_once(guest: RunningGuest, workdir: Path) -> None:
    (workdir / "old.txt").write_text("old")
    payload = os.urandom(3 * 1024 * 1024 + 7)

    async def body() -> None:
        upload = await guest.client.upload(metadata={"k": "v"})
        async with upload:
            await upload.begin(str(workdir / "old.txt"))
            await upload.write(b"new")
            await upload.end()
            await upload.begin(str(workdir / "sub" / "big.bin"))
            for start in range(0, len(payload), 100_000):
                await upload.write(payload[start : start + 100_000])
            await upload.end()
            # Everything is received and staged; nothing is in place before the commit.
            assert (workdir / "old.txt").read_text() == "old"
            assert not (workdir / "sub" / "big.bin").exists()
            entries = await upload.commit()
        assert [(e.name, e.size, e.metadata) for e in entries] == [
            ("old.txt", 3, {"k": "v"}),
            ("big.bin", len(payload), {"k": "v"}),
        ]

    run(body())
    assert (workdir / "old.txt").read_text() == "new"
    assert (workdir / "sub" / "big.bin").read_bytes() == payload
    assert _names(workdir) == ["old.txt", "sub"]
    assert _names(workdir / "sub") == ["big.bin"]


def test_write_files_abandoned_changes_nothing(guest: RunningGuest, workdir: Path) -> None:
    (workdir / "keep.txt").write_text("original")

    async def body() -> None:
        upload = await guest.client.upload()
        await upload.begin(str(workdir / "keep.txt"))
        await upload.write(b"replacement")
        await upload.end()
        await upload.begin(str(workdir / "new.txt"))
        await upload.write(b"half of a fi")
        await upload.aclose()  # returns once the guest removed what it staged

    run(body())
    assert (workdir / "keep.txt").read_text() == "original"
    assert _names(workdir) == ["keep.txt"]


def test_write_files_refusal_of_one_file_discards_the_others(
    guest: RunningGuest, workdir: Path
) -> None:
    (workdir / "keep.txt").write_text("original")
    (workdir / "adir").mkdir()

    async def body() -> None:
        upload = await guest.client.upload()
        async with upload:
            await upload.begin(str(workdir / "keep.txt"))
            await upload.write(b"replacement")
            await upload.end()
            with pytest.raises(GuestError) as info:
                await upload.begin(str(workdir / "adir"))
                for _ in range(64):  # the refusal arrives while data is still being sent
                    await upload.write(b"x" * 65536)
                await upload.end()
                await upload.commit()
            assert info.value.connect == "invalid_argument"
            # The guest removed the first file's staging before it answered.
            assert _names(workdir) == ["adir", "keep.txt"]

    run(body())
    assert (workdir / "keep.txt").read_text() == "original"


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_disk_full_is_one_condition_whatever_the_errno(number: int) -> None:
    error = from_oserror(OSError(number, os.strerror(number)), "write /x")
    assert (error.code, error.reason) == ("resource_exhausted", DISK_FULL)
    assert error.to_json()["reason"] == DISK_FULL
    assert "disk space" in error.message


def test_other_exhaustion_is_not_disk_full() -> None:
    error = from_oserror(OSError(errno.EMFILE, "Too many open files"), "open /x")
    assert (error.code, error.reason) == ("resource_exhausted", None)
    assert "reason" not in error.to_json()
