"""Escape and kernel attack surface seen from inside a sandbox, on every runtime (security.md
§2.2 ESC-04, ESC-10, ESC-11, ESC-14, ESC-17).

Why: these are the doors out of a container that capabilities and seccomp alone do not close
(device nodes, writable procfs/sysfs knobs, a runtime socket left in reach, a host path in the
mount table, ptrace, kernel addresses). Each test runs attacker code in a real sandbox, once per
``runtime`` (docker, bwrap), and asserts the exact errno the attacker gets; where an attempt
could change the host, the action is chosen so it is a no-op even if it were let through, and a
host-side invariant is checked as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import RunningServer
from tests.framework.inside import run_python

DENIED = {"EPERM", "EACCES", "ENOENT", "EROFS"}
USERS = ["user", "root"]


@pytest.mark.parametrize("user", USERS)
def test_ESC_04_no_device_nodes(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any], user: str
) -> None:
    script = r"""
import stat
attempt("mknod block 8:0", lambda: os.mknod("/tmp/sg-sda", stat.S_IFBLK | 0o600, os.makedev(8, 0)))
attempt("mknod char 1:1", lambda: os.mknod("/tmp/sg-mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)))
for path in ("/dev/mem", "/dev/kmsg", "/dev/sda", "/dev/kvm", "/dev/port", "/dev/vda", "/dev/null"):
    attempt(path, lambda path=path: os.close(os.open(path, os.O_RDONLY)))
out["left behind"] = [p for p in ("/tmp/sg-sda", "/tmp/sg-mem") if os.path.lexists(p)]
"""
    answers = run_python(runtime_server.url, runtime_sandbox, script, user=user)
    assert answers.pop("/dev/null") == "OK", "the probe itself must be able to open a device"
    assert answers.pop("left behind") == []
    assert answers.pop("mknod block 8:0") == "EPERM"
    assert answers.pop("mknod char 1:1") == "EPERM"
    assert len(answers) == 6
    assert {path: a for path, a in answers.items() if a not in DENIED} == {}


@pytest.mark.parametrize("user", USERS)
def test_ESC_10_procfs_and_sysfs_are_not_writable(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any], user: str
) -> None:
    host_core_pattern = Path("/proc/sys/kernel/core_pattern").read_bytes()
    # Each write is a no-op even if it were let through: a sysctl gets its own current value
    # back, sysrq gets 'h' (print help), drop_caches '1' (drop the page cache, harmless).
    script = r"""
def current(path):
    try:
        with open(path, "rb") as f:
            return f.read() or b"\n"
    except OSError:
        return b"\n"

def write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)

targets = {
    "/proc/sys/kernel/core_pattern": None,
    "/proc/sys/kernel/modprobe": None,
    "/sys/kernel/uevent_helper": None,
    "/proc/sysrq-trigger": b"h",
    "/proc/sys/vm/drop_caches": b"1",
}
for path, data in targets.items():
    attempt("write " + path, lambda path=path, data=data: write(path, data or current(path)))

def read(path):
    with open(path, "rb") as f:
        out["read " + path] = len(f.read(4096))

for path in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/kmsg"):
    attempt("open " + path, lambda path=path: read(path))
buffer = ctypes.create_string_buffer(4096)
attempt("syslog read-all", lambda: syscall(103, 3, buffer, 4096))
"""
    answers = run_python(runtime_server.url, runtime_sandbox, script, user=user)
    writes = {k: v for k, v in answers.items() if k.startswith("write ")}
    assert len(writes) == 5
    assert all(v in DENIED for v in writes.values()), writes
    for path in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/kmsg"):
        opened = answers["open " + path]
        # Masked (a read gives nothing) or denied outright; never kernel state.
        assert opened in DENIED or answers["read " + path] == 0, (path, answers)
    assert answers["syslog read-all"] == "EPERM", "dmesg must be denied"
    assert Path("/proc/sys/kernel/core_pattern").read_bytes() == host_core_pattern


#: Runtime control sockets an escape kit looks for (deepce, CDK, amicontained).
RUNTIME_SOCKETS = [
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/containerd/containerd.sock.ttrpc",
    "/var/run/docker/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/run/podman/podman.sock",
    "/run/buildkit/buildkitd.sock",
    "/run/systemd/private",
    "/run/dbus/system_bus_socket",
]

#: Host device files a sandbox may bind from devtmpfs (bubblewrap's ``--dev``).
SAFE_DEVICES = {"/null", "/zero", "/full", "/random", "/urandom", "/tty"}
HOST_BACKED = {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "overlay", "devtmpfs"}


def _foreign_mounts(mountinfo: str, sandbox_id: str) -> list[str]:
    """Mountinfo lines exposing a host path beyond what the design allows (ESC-11): the
    sandbox's own copy-on-write root (an overlay over its staged, idmapped template), its own
    ``/run/sandgate`` directory (read-only), the guest's archive every sandbox shares over its
    placeholder there (read-only, nosuid, nodev), and harmless devtmpfs nodes."""
    foreign = []
    for line in mountinfo.splitlines():
        fields = line.split()
        root, mountpoint, options = fields[3], fields[4], fields[5].split(",")
        fstype, source = fields[fields.index("-") + 1], fields[fields.index("-") + 2]
        if fstype in ("cgroup", "cgroup2"):
            allowed = root == "/" and "ro" in options
        elif fstype in HOST_BACKED or source.startswith("/dev/"):
            super_options = fields[-1]
            allowed = (
                (
                    mountpoint == "/"
                    and fstype == "overlay"
                    and f"lowerdir=/run/sandgate-rt/stage/{sandbox_id}/lower," in super_options
                )
                or (
                    mountpoint == "/run/sandgate"
                    and sandbox_id in root.split("/")
                    and "ro" in options
                )
                or (
                    mountpoint == "/run/sandgate/guest.pyz"
                    and root.endswith("/guest/guest.pyz")
                    and {"ro", "nosuid", "nodev"} <= set(options)
                )
                or (fstype == "devtmpfs" and root in SAFE_DEVICES and mountpoint == "/dev" + root)
                # runc masks sensitive /proc and /sys files with its /dev/null.
                or (
                    fstype == "devtmpfs"
                    and root == "/null"
                    and mountpoint.startswith(("/proc/", "/sys/"))
                )
            )
        else:
            allowed = True
        if not allowed:
            foreign.append(line)
    return foreign


#: Mounts the allowlist must reject (checked first, so ESC-11 is able to fail).
HOSTILE_MOUNTS = [
    "1 0 254:0 / / rw,relatime - ext4 /dev/vda rw",
    "2 1 254:0 /var/run/docker.sock /var/run/docker.sock rw - ext4 /dev/vda rw",
    "3 1 254:0 /home/sandboxes/someone-else /run/sandgate rw - ext4 /dev/vda rw",
    "8 1 254:0 /home/guest/guest.pyz /run/sandgate/guest.pyz rw,nosuid,nodev - ext4 /dev/vda rw",
    "9 1 254:0 /etc/shadow /run/sandgate/guest.pyz ro,nosuid,nodev - ext4 /dev/vda rw",
    "6 1 0:50 / / rw - overlay overlay rw,lowerdir=/run/sandgate-rt/stage/other/lower,upperdir=x",
    "7 1 0:6 /sda /proc/keys rw - devtmpfs devtmpfs rw",
    "4 1 0:6 / /dev/host rw - devtmpfs devtmpfs rw",
    "5 1 0:29 /docker /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu",
]


def test_ESC_11_no_host_sockets_or_mounts(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any]
) -> None:
    script = rf"""
import stat
for path in {RUNTIME_SOCKETS!r}:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    attempt(path, lambda path=path: sock.connect(path))
    sock.close()
found = []
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
    for name in dirs + files:
        path = os.path.join(top, name)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
        except OSError:
            pass
out["sockets"] = sorted(found)
with open("/proc/self/mountinfo") as f:
    out["mountinfo"] = f.read()
"""
    assert _foreign_mounts("\n".join(HOSTILE_MOUNTS), "me") == HOSTILE_MOUNTS
    answers = run_python(runtime_server.url, runtime_sandbox, script, user="root")
    assert {answers[path] for path in RUNTIME_SOCKETS} == {"ENOENT"}, answers
    sockets = answers["sockets"]
    assert "/run/sandgate/guest.sock" in sockets, "the search must find the guest's own socket"
    assert [s for s in sockets if not s.startswith("/run/sandgate/")] == [], sockets
    assert _foreign_mounts(answers["mountinfo"], runtime_sandbox["sandboxID"]) == []
    sandgate = [line for line in answers["mountinfo"].splitlines() if " /run/sandgate " in line]
    assert len(sandgate) == 1, "the guest directory is mounted once, from this sandbox's own"


@pytest.mark.parametrize("user", USERS)
def test_ESC_14_no_ptrace_inside_the_sandbox(
    runtime: str, runtime_server: RunningServer, runtime_sandbox: dict[str, Any], user: str
) -> None:
    # PTRACE_SEIZE does not stop the tracee, so even a wrongly allowed attempt leaves the guest
    # running; the tracer's exit detaches it. PTRACE_ATTACH only targets our own sleeping child.
    script = r"""
import subprocess
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206

def uid_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("Uid:")).split()[1])

child = subprocess.Popen(["sleep", "30"])
out["self uid"] = os.getuid()
targets = {}
attempt(f"attach {child.pid}", lambda: syscall(101, PTRACE_ATTACH, child.pid, 0, 0))
targets[child.pid] = uid_of(child.pid)
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) not in (os.getpid(), child.pid):
        pid = int(name)
        try:
            targets[pid] = uid_of(pid)
        except OSError:
            continue
        attempt(f"seize {pid}", lambda pid=pid: syscall(101, PTRACE_SEIZE, pid, 0, 0))
buffer = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.cast(buffer, ctypes.c_void_p), 8)
for pid in targets:
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    attempt(f"vm_readv {pid}", lambda pid=pid: syscall(310, pid, local, 1, remote, 1, 0))
out["targets"] = {str(pid): uid for pid, uid in targets.items()}
child.kill()
"""
    answers = run_python(runtime_server.url, runtime_sandbox, script, user=user)
    targets: dict[str, int] = answers.pop("targets")
    answers.pop("self uid")
    assert "1" in targets and len(targets) >= 3, "init, the guest and our child are all probed"
    readv = {k: v for k, v in answers.items() if k.startswith("vm_readv ")}
    assert readv and set(readv.values()) == {"EPERM"}, readv
    traced = {k: v for k, v in answers.items() if not k.startswith("vm_readv ") and v != "EPERM"}
    assert traced == {}, (traced, targets)


@pytest.mark.parametrize("user", USERS)
def test_ESC_17_no_kernel_info_leaks(
    runtime_server: RunningServer, runtime_sandbox: dict[str, Any], user: str
) -> None:
    script = r"""
def kallsyms():
    with open("/proc/kallsyms") as f:
        lines = f.read().splitlines()
    out["kallsyms lines"] = len(lines)
    out["kallsyms addresses"] = [l for l in lines if int(l.split()[0], 16) != 0][:3]
attempt("kallsyms", kallsyms)
attempt("debugfs", lambda: out.__setitem__("debugfs entries", os.listdir("/sys/kernel/debug")))
with open("/proc/self/mountinfo") as f:
    out["debug mounts"] = [
        l for l in f.read().splitlines()
        if l.split(" - ")[1].split()[0] in ("debugfs", "tracefs", "bpf")
    ]
def paranoid():
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        out["perf_event_paranoid"] = int(f.read())
attempt("paranoid", paranoid)

class PerfEventAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("config", ctypes.c_uint64), ("rest", ctypes.c_uint8 * 112)]

for name, exclude_kernel in (("perf kernel+user", 0), ("perf user only", 1)):
    attr = PerfEventAttr(type=1, size=ctypes.sizeof(PerfEventAttr), config=0)  # SW cpu-clock
    # flags (u64 at offset 40): bit 5 exclude_kernel, bit 6 exclude_hv
    ctypes.c_uint64.from_buffer(attr, 40).value = (exclude_kernel << 5) | (exclude_kernel << 6)
    attempt(name, lambda attr=attr: os.close(syscall(298, ctypes.byref(attr), 0, -1, -1, 0)))
"""
    answers = run_python(runtime_server.url, runtime_sandbox, script, user=user)
    if answers["kallsyms"] == "OK":
        assert answers["kallsyms lines"] > 1000
        assert answers["kallsyms addresses"] == [], "kernel addresses must be zeroed"
    else:
        assert answers["kallsyms"] in DENIED
    assert answers["debugfs"] in DENIED or answers["debugfs entries"] == []
    assert answers["debug mounts"] == []
    if answers["paranoid"] == "OK":
        assert answers["perf_event_paranoid"] >= 2
    assert answers["perf kernel+user"] in ("EPERM", "EACCES", "ENOSYS")
    assert answers["perf user only"] in ("EPERM", "EACCES", "ENOSYS")
