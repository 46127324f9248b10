"""Runs inside an official e2b SDK environment: one burst of concurrent creates, each followed
by ``commands.run("true")``; prints one JSON object: the wall time from the common start to the
last first command done, the host's CPU time over that wall time (every process's, from
``/proc/stat``: on a 2-core host a burst is CPU-bound, and CPU is what a paired comparison can
tell apart through the noise of wall times), and how many creates failed. The sandboxes are
killed after the burst, untimed (a kill inside the burst would load the machine while later
creates still run).

With a third argument, the pid of the Sandgate server: also that process's CPU time over the
burst, its helper processes' (its children that run Python: the audit writer; bubblewrap's
monitors are its children too, and are the runtime's), and this client's own. With a fourth,
at most that many creates run at once (the rest wait their turn, all released together:
``bench/burst_scaling.py``); by default all of them.

argv: burst_size template [server_pid [at_once]]
"""

import json
import os
import sys
import threading
import time

from e2b import Sandbox


def host_cpu_s() -> float:
    """CPU time spent by the whole host so far (all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU time so far of a live process (all its threads)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def helpers(server: int) -> list[int]:
    """The server's own helper processes: its children whose command is the server's Python."""
    with open(f"/proc/{server}/stat") as stat:
        comm = stat.read().split("(", 1)[1].rsplit(")", 1)[0]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name, rest = text.split("(", 1)[1].rsplit(")", 1)
        if name == comm and int(rest.split()[1]) == server:
            found.append(int(entry))
    return found


def main() -> None:
    size, template = int(sys.argv[1]), sys.argv[2]
    server = int(sys.argv[3]) if len(sys.argv) > 3 else None
    turns = threading.Semaphore(int(sys.argv[4]) if len(sys.argv) > 4 else size)
    Sandbox.create(template).kill()  # warm-up: connections, imports, page cache
    sandboxes: list[Sandbox] = []
    failures: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(size + 1)

    def one() -> None:
        barrier.wait()
        try:
            with turns:
                sandbox = Sandbox.create(template)
                with lock:
                    sandboxes.append(sandbox)
                exit_code = sandbox.commands.run("true").exit_code
            if exit_code != 0:
                raise RuntimeError(f"`true` exited {exit_code}")
        except Exception as exc:  # a failure is a data point here
            with lock:
                failures.append(repr(exc)[:300])

    helper_pids = helpers(server) if server else []  # before the burst: /proc is long to walk
    threads = [threading.Thread(target=one) for _ in range(size)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start, cpu, client = time.perf_counter(), host_cpu_s(), time.process_time()
    gateway = process_cpu_s(server) if server else 0.0
    helper = sum(process_cpu_s(pid) for pid in helper_pids)
    for thread in threads:
        thread.join()
    elapsed, cpu, client = (
        time.perf_counter() - start,
        host_cpu_s() - cpu,
        time.process_time() - client,
    )
    gateway = process_cpu_s(server) - gateway if server else 0.0
    helper = sum(process_cpu_s(pid) for pid in helper_pids) - helper
    for sandbox in sandboxes:
        sandbox.kill()
    print(
        json.dumps(
            {
                "burst_s": elapsed,
                "host_cpu_s": cpu,
                "server_cpu_s": gateway,
                "helpers_cpu_s": helper,
                "client_cpu_s": client,
                "failures": failures,
            }
        )
    )


if __name__ == "__main__":
    main()
