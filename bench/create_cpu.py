"""Where a bwrap create's CPU goes, process by process, from the scheduler's own accounting.

"Where a burst's CPU goes" (``bench/burst_budget.py``) splits a burst's CPU by reading
``/proc``: the server, its audit writer and the SDK client by process, and the rest (the
runtime and the sandboxes) as what remains of the host's total. This bench names the rest:
it records the scheduler (``perf sched record``, every task's run time, exact, no sampling)
while an SDK client creates sandboxes one after another on a warmed server, each followed by
``commands.run("true")``, and sorts every task the recording saw by where it comes from:

* the server's process (every thread) and its helper process (the audit writer);
* the launcher (``sh`` lowering the limits and joining the cgroups, ``setpriv``), which then
  becomes bubblewrap's monitor: one process, three programs;
* bubblewrap's child, which sets the sandbox up (namespaces, mounts, seccomp) and then
  becomes the guest (Python: start, imports, serving the create and the command): one
  process, as both run in the same task;
* the first command (``bash -l -c true``, the guest's child) and anything else the guest
  starts;
* helpers the server starts outside a sandbox (a uid slot's user namespace, made once per
  slot and process: none after the warm-up);
* the SDK client (every thread), kernel threads (RCU, workqueues: freeing what creates
  allocate, network softirqs) and anything else on the host.

The warm-up first runs as many sandboxes at once as a round creates, so every uid slot is
set up before the recording, as on a server that has run them before.

Usage: ``uv run python bench/create_cpu.py [--rounds 3] [--creates 10]`` (as root, with
Docker, the ``base`` template built and ``perf`` installed: Debian's ``linux-perf``). Writes
``bench/results/create_cpu.json`` and the "Where a create's CPU goes, process by process"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import ServerFactory

from bench._procmem import host_cpu_seconds
from bench._report import run_head, write_results, write_section
from bench._workers import WORKERS, pinned_sdk

#: The rows of the table, in order: what each part of a create is.
PARTS = {
    "server": "the server's process (HTTP, store, runtime calls, hooks, guest client)",
    "audit writer": "the server's helper process (sealing, writing, indexing audit records)",
    "launcher + monitor": "`sh` (limits, cgroups), `setpriv`, then bubblewrap's monitor",
    "set-up + guest": "bubblewrap's child: the sandbox's set-up, then the guest (Python)",
    "first command": "`bash -l -c true`, the guest's child",
    "server's other helpers": "uid slot set-up and other programs the server runs",
    "SDK client": "the official Python SDK's process (every thread)",
    "kernel threads": "RCU, workqueues, softirqs",
    "other": "the rest of the host (Docker's daemons, other work)",
}
#: ``comm[tid]`` or ``comm[tid/pid]``, parent, switches, run time (ms), ...
_LINE = re.compile(r"^\s*(?P<comm>.+?)\[(?P<tid>\d+)(?:/(?P<pid>\d+))?\]\s+(?P<parent>-?\d+)"
                   r"\s+\d+\s+(?P<run>[\d.]+)\s")  # fmt: skip


@dataclass(frozen=True)
class Task:
    comm: str
    tid: int
    pid: int
    parent: int
    run_ms: float


def parse(summary: str) -> list[Task]:
    """The tasks of ``perf sched timehist -s``'s summaries (running and terminated)."""
    tasks = []
    for line in summary.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        tid = int(match["tid"])
        tasks.append(
            Task(
                comm=match["comm"].strip(),
                tid=tid,
                pid=int(match["pid"] or tid),
                parent=int(match["parent"]),
                run_ms=float(match["run"]),
            )
        )
    return tasks


def classify(tasks: list[Task], server: int, client: int) -> dict[str, float]:
    """Run time (ms) per part: each task by its process's ancestry (a parent is recorded as
    the thread that forked, so threads are first mapped to their process)."""
    process_of = {task.tid: task.pid for task in tasks}
    parent_of = {task.pid: process_of.get(task.parent, task.parent) for task in tasks}
    comm_of = {task.pid: task.comm for task in tasks if task.tid == task.pid}

    def part(pid: int) -> str:
        if pid == server:
            return "server"
        path = [pid]  # from the task up to the server's child, or to the top of what ran
        while path[-1] in parent_of and parent_of[path[-1]] not in (0, 1, server, client):
            if len(path) > 64 or parent_of[path[-1]] in path:
                break
            path.append(parent_of[path[-1]])
        above = parent_of.get(path[-1])
        if pid == client or above == client:
            return "SDK client"
        if pid == 2 or above == 2 or path[-1] == 2:
            return "kernel threads"
        if above != server:
            return "other"
        if comm_of.get(path[-1]) == "bwrap":
            return ("launcher + monitor", "set-up + guest", "first command")[min(len(path), 3) - 1]
        if len(path) == 1 and comm_of.get(pid, "").startswith("python"):
            return "audit writer"
        return "server's other helpers"

    totals = dict.fromkeys(PARTS, 0.0)
    for task in tasks:
        if not task.comm.startswith("perf"):  # the recorder is not part of a create
            totals[part(task.pid)] += task.run_ms
    return totals


def record(worker: subprocess.Popen[str], data: Path) -> float:
    """One round: ``perf sched record`` around the worker's sequential creates; returns the
    host's CPU over them by ``/proc/stat`` (seconds; the recorder's included)."""
    perf = subprocess.Popen(
        ["perf", "sched", "record", "-o", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (data.exists() and data.stat().st_size > 0):  # perf writes its header first
        if perf.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"perf sched record did not start: {perf.communicate()[1][-2000:]}")
        time.sleep(0.05)
    assert worker.stdin is not None and worker.stdout is not None
    cpu = host_cpu_seconds()
    worker.stdin.write("go\n")
    worker.stdin.flush()
    answer = worker.stdout.readline().strip()
    cpu = host_cpu_seconds() - cpu
    perf.send_signal(2)
    perf.wait(timeout=60)
    worker.stdin.write("kill\n")
    worker.stdin.flush()
    if answer != "done":
        raise SystemExit(f"the SDK worker: {answer or 'no answer'}")
    if worker.stdout.readline().strip() != "killed":
        raise SystemExit("the SDK worker did not kill its sandboxes")
    return cpu


def measure(python: Path, rounds: int, creates: int) -> dict[str, Any]:
    env = {
        **runtime_env("bwrap"),
        "SANDGATE_TEMPLATES__WARM_POOL": "{}",
        "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": str(creates + 10),
    }
    samples: dict[str, list[float]] = {name: [] for name in [*PARTS, "host"]}
    with tempfile.TemporaryDirectory(prefix="sgc", dir="/tmp") as base_dir:
        factory = ServerFactory(Path(base_dir))
        try:
            server = factory(extra_env=env)
            assert server.process is not None
            worker = subprocess.Popen(
                [str(python), str(WORKERS / "e2b_sequential.py"), str(creates), "base"],
                env={**server.env, "PATH": "/usr/bin:/bin"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert worker.stdout is not None
                if worker.stdout.readline().strip() != "ready":
                    raise SystemExit("the SDK worker's warm-up failed")
                for index in range(rounds):
                    data = Path(base_dir) / f"sched-{index}.data"
                    host = record(worker, data)
                    summary = subprocess.run(
                        ["perf", "sched", "timehist", "-i", str(data), "-s"],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                    totals = classify(parse(summary), server.process.pid, worker.pid)
                    for name, value in totals.items():
                        samples[name].append(value / creates)
                    samples["host"].append(host * 1000 / creates)
                    print(f"round {index + 1}:", {k: round(v[-1], 1) for k, v in samples.items()})
            finally:
                if worker.stdin is not None:
                    worker.stdin.close()
                worker.wait(timeout=120)
        finally:
            factory.close()
    return {
        "samples_ms": samples,
        "median_ms": {name: statistics.median(values) for name, values in samples.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--creates", type=int, default=10)
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed: apt-get install linux-perf")
    python = pinned_sdk().python
    loads = [os.getloadavg()[0]]
    data = measure(python, args.rounds, args.creates)
    loads.append(os.getloadavg()[0])
    result: dict[str, Any] = {
        **run_head(loads),
        "rounds": args.rounds,
        "creates": args.creates,
        **data,
    }
    write_results("create_cpu.json", result)
    write_section("Where a create's CPU goes, process by process", _body(result, args))


def _body(result: dict[str, Any], args: argparse.Namespace) -> str:
    median = result["median_ms"]
    total = sum(median[name] for name in PARTS)
    rows = "\n".join(
        f"| {name} | {what} | {median[name]:.1f} | {median[name] / total * 100:.0f} % |"
        for name, what in PARTS.items()
    )
    gateway = median["server"] + median["audit writer"]
    sandbox = median["launcher + monitor"] + median["set-up + guest"] + median["first command"]
    return f"""
Measured {result["when"]} on {result["machine"]}, 1-minute load average
{result["load"][0]:.1f}-{result["load"][1]:.1f}; medians of {args.rounds} rounds. Each round
records the scheduler (`perf sched record`: every task's run time, exact) while the official
Python SDK creates {args.creates} sandboxes one after another on a bwrap server of this code
(no warm pool, every uid slot set up by a warm-up), each followed by `commands.run("true")`
and left running until the round ends (killed after it, unrecorded); every task is sorted by
its ancestry. CPU per create, in ms. Reproduce: `uv run python bench/create_cpu.py --rounds
{args.rounds} --creates {args.creates}` (needs `perf`).

| part | what | CPU per create (ms) | share |
|---|---|---|---|
{rows}
| all | | {total:.1f} | 100 % |

The host's CPU over the same creates by `/proc/stat` was {median["host"]:.1f} ms per create: it
also holds what no task is charged with, the recorder's own work and interrupt work done while
a core was otherwise idle (the scheduler charges that to the idle task).

- The gateway (server and audit writer) spends {gateway:.1f} ms per create; the sandbox's own
  processes (launcher, bubblewrap, the guest, the first command) {sandbox:.1f} ms, of which
  the one task that is first bubblewrap's set-up and then the guest
  {median["set-up + guest"]:.1f}.
"""


if __name__ == "__main__":
    main()
