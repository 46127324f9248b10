"""Syscall probe run *inside* a sandbox (security.md §2.1 "probe technique"): every call gets
deliberately invalid arguments, so a syscall the filter lets through fails with EINVAL, EFAULT,
EBADF or ESRCH, and a blocked one with EPERM or ENOSYS; nothing is ever really done. Prints
one JSON object ``{name: errno name}``. Standard library only (it runs in the template image).
"""

import ctypes
import errno
import json
import os
import socket

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X32 = 0x40000000

# x86-64 numbers; (name, number, args)
CALLS = [
    ("keyctl", 250, (-1, 0, 0, 0, 0)),
    ("add_key", 248, (0, 0, 0, 0, -1)),
    ("request_key", 249, (0, 0, 0, -1)),
    ("bpf", 321, (-1, 0, 0)),
    ("userfaultfd", 323, (-1,)),
    ("io_uring_setup", 425, (0, 0)),
    ("io_uring_enter", 426, (-1, 0, 0, 0, 0, 0)),
    ("io_uring_register", 427, (-1, 0, 0, 0)),
    ("perf_event_open", 298, (0, -1, -1, -1, 0)),
    ("ptrace", 101, (-1, 0, 0, 0)),
    ("process_vm_readv", 310, (0, 0, 0, 0, 0, -1)),
    ("process_vm_writev", 311, (0, 0, 0, 0, 0, -1)),
    ("kexec_load", 246, (0, 0, 0, -1)),
    ("kexec_file_load", 320, (-1, -1, 0, 0, -1)),
    ("init_module", 175, (0, 0, 0)),
    ("finit_module", 313, (-1, 0, -1)),
    ("delete_module", 176, (0, -1)),
    ("open_by_handle_at", 304, (-1, 0, 0)),
    ("pivot_root", 155, (0, 0)),
    ("setns", 308, (-1, 0)),
    ("unshare", 272, (0x10000000,)),
    ("settimeofday", 164, (0, 1)),
    ("clock_settime", 227, (-1, 0)),
    ("swapon", 167, (0, 0)),
    ("reboot", 169, (0, 0, 0, 0)),
    ("acct", 163, (1,)),
    ("iopl", 172, (99,)),
    ("ioperm", 173, (0, 0, 99)),
    ("personality", 135, (0x0040000,)),
    ("fsopen", 430, (0, -1)),
    ("fsmount", 432, (-1, -1, -1)),
    ("move_mount", 429, (-1, 0, -1, 0, -1)),
    ("open_tree", 428, (-1, 0, -1)),
]


def call(number, args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
    if result >= 0:
        return "OK"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def main():
    out = {name: call(number, args) for name, number, args in CALLS}
    for family, kind, proto, name in (
        (socket.AF_PACKET, socket.SOCK_RAW, 0, "socket_af_packet"),
        (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP, "socket_raw_icmp"),
        (40, socket.SOCK_STREAM, 0, "socket_af_vsock"),
    ):
        try:
            socket.socket(family, kind, proto).close()
            out[name] = "OK"
        except OSError as exc:
            out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    # An x32 call must not reach the kernel's x32 table: the filter kills the caller.
    pid = os.fork()
    if pid == 0:
        libc.syscall(ctypes.c_long(X32 | 39))  # getpid, x32 flavour
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    out["x32_getpid"] = (
        f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {status >> 8}"
    )
    print(json.dumps(out))


main()
