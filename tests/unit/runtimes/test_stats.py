"""Resource readings (``runtimes/_stats.py``): finding a process's cgroup from the host's view
on v1, hybrid and v2 layouts, and reading both file formats.

The real v1 hierarchies of this host are read through a process of our own; v2 counters are
read from the host's cgroup2 mount where it has them (``cpu.stat`` exists without
controllers) and from files in the kernel's format for the memory controller this v1 host
does not give cgroup2. The integration tests read real sandboxes on both runtimes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.runtimes._stats import (
    CgroupFiles,
    _cpu_v2,
    cgroup_files_of_pid,
    cgroup_mounts,
    files_from,
    read_many,
    read_stats,
)

V1 = """\
30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
33 25 0:29 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
"""
V2 = "40 1 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
#: A container's view: the memory hierarchy's root is the container's own cgroup.
NESTED = "30 25 0:26 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"


def test_v1_resolves_memory_and_cpuacct_on_a_shared_hierarchy() -> None:
    membership = "5:memory:/docker/c1\n4:cpu,cpuacct:/docker/c1\n0::/\n"
    files = files_from(membership, cgroup_mounts(V1))
    assert files == CgroupFiles(
        1, Path("/sys/fs/cgroup/cpu,cpuacct/docker/c1"), Path("/sys/fs/cgroup/memory/docker/c1")
    )


def test_v1_without_cpuacct_has_no_cpu_counter() -> None:
    mounts = cgroup_mounts(V1.replace("rw,cpu,cpuacct\n", "rw,cpu\n"))
    files = files_from("5:memory:/sandgate/x\n4:cpu:/sandgate/x\n", mounts)
    assert files is not None and files.cpu is None


def test_v2_and_a_mount_rooted_below_the_hierarchy() -> None:
    v2 = files_from("0::/sandgate/abc\n", cgroup_mounts(V2))
    assert v2 == CgroupFiles(
        2, Path("/sys/fs/cgroup/sandgate/abc"), Path("/sys/fs/cgroup/sandgate/abc")
    )
    nested = files_from("5:memory:/docker/abc/inner\n", cgroup_mounts(NESTED))
    assert nested is not None and nested.memory == Path("/sys/fs/cgroup/memory/inner")
    assert files_from("garbage\n", cgroup_mounts(V2)) is None


def test_a_real_process_on_this_host(tmp_path: Path) -> None:
    files = cgroup_files_of_pid(os.getpid())
    assert files is not None
    stats = read_stats(files, tmp_path)
    assert stats is not None
    assert stats.mem_usage > 0 and stats.mem_cache >= 0
    assert stats.disk_total > 0 and 0 <= stats.disk_used <= stats.disk_total
    if files.cpu is not None:
        assert stats.cpu_ns is not None and stats.cpu_ns > 0
    assert cgroup_files_of_pid(2**22 + 12345) is None, "a pid that does not exist"


def test_v1_files_are_read_in_the_kernels_format(tmp_path: Path) -> None:
    memory, cpu = tmp_path / "memory", tmp_path / "cpuacct"
    memory.mkdir()
    cpu.mkdir()
    (memory / "memory.usage_in_bytes").write_text("73400320\n")
    (memory / "memory.stat").write_text("cache 100\nrss 5\ntotal_cache 41943040\ntotal_rss 9\n")
    (cpu / "cpuacct.usage").write_text("123456789\n")
    stats = read_stats(CgroupFiles(1, cpu, memory), tmp_path)
    assert stats is not None
    assert (stats.cpu_ns, stats.mem_usage, stats.mem_cache) == (123456789, 73400320, 41943040)


def test_v2_files_are_read_in_the_kernels_format(tmp_path: Path) -> None:
    (tmp_path / "memory.current").write_text("52428800\n")
    (tmp_path / "memory.stat").write_text("anon 10\nfile 20971520\nkernel 3\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
    stats = read_stats(CgroupFiles(2, tmp_path, tmp_path), tmp_path)
    assert stats is not None
    assert (stats.cpu_ns, stats.mem_usage, stats.mem_cache) == (2_500_000, 52428800, 20971520)


@pytest.fixture
def unified_child() -> Iterator[Path]:
    """A child cgroup of this host's cgroup2 mount with a busy process in it."""
    root = next(
        Path(line.split(" - ")[0].split()[4])
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if " - cgroup2 " in line
    )
    child = root / f"sg-stats-{os.getpid()}"
    child.mkdir()
    busy = subprocess.Popen(
        ["sh", "-c", "read x; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"],
        stdin=subprocess.PIPE,
    )
    try:
        (child / "cgroup.procs").write_text(str(busy.pid))
        assert busy.stdin is not None
        busy.stdin.write(b"go\n")
        busy.stdin.close()
        busy.wait(60)
        yield child
    finally:
        busy.kill()
        busy.wait()
        child.rmdir()


def test_v2_cpu_time_of_a_real_cgroup(unified_child: Path) -> None:
    used = _cpu_v2(unified_child)
    assert used is not None and used > 1_000_000, "the loop ran for more than a millisecond"


def test_a_gone_sandbox_is_left_out(tmp_path: Path) -> None:
    gone = CgroupFiles(2, tmp_path / "nope", tmp_path / "nope")
    assert read_stats(gone, tmp_path) is None
    (tmp_path / "memory.current").write_text("1\n")
    (tmp_path / "memory.stat").write_text("file 0\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 1\n")
    here = CgroupFiles(2, tmp_path, tmp_path)
    found = read_many({"a": (here, tmp_path), "b": (gone, tmp_path), "c": (here, tmp_path / "x")})
    assert set(found) == {"a"}
