"""Measures Sandgate next to its peers; runs in the peers' own environment (``bench/peers``).

argv: one path to a JSON config written by ``bench/peers.py`` (servers, image, raw ``bwrap``
command line, counts); writes raw samples (seconds, bytes) to the config's ``out`` path.
Progress goes to stderr.

Every measure alternates its subjects sample by sample (or burst by burst), so load from the
other work on this shared machine lands on all of them alike. A failed create or command stops
the run with its error rather than becoming a silent gap in one subject's samples. Everything
this driver starts is tracked and torn down in ``finally`` blocks, on error and on Ctrl-C too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import docker
import sandlock
from bench._procmem import (
    cgroup_memory,
    cpu_seconds,
    mem_available,
    parent,
    process_tree,
    pss,
)
from e2b import Sandbox
from llm_sandbox import SandboxSession

#: What sandlock may touch: the host's own system directories (it confines processes on the
#: host file system; it has no image root).
SANDLOCK_FS = {
    "fs_readable": ["/usr", "/lib", "/lib64", "/bin", "/etc", "/dev", "/proc"],
    "fs_writable": ["/tmp"],
}
#: Creates timed one by one at the end of each density step; the rest fill concurrently.
DENSITY_TIMED = 10
#: The command floor's row (bench/peers.py reads it by this name).
FLOOR = "floor: `bash -l -c true` in a held-open shell (raw bwrap, same image)"
DENSITY_FILL_CONCURRENCY = 4
#: The SDK's own default (60 s) times out creates in a burst on a loaded 2-core machine.
REQUEST_TIMEOUT_S = 300
#: A sandbox must outlive the slowest measure (the density ramp), not E2B's 300 s default.
SANDBOX_TIMEOUT_S = 3600


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Config:
    servers: dict[str, dict[str, str]]  # "bwrap"/"docker" -> api_key, url, domain, home
    image: str
    raw_bwrap: list[str]  # the prefix: bwrap ... --  (a command follows)
    n: int
    bursts: int
    burst_size: int
    roundtrips: int
    idle: int
    density_steps: list[int]
    out: str


@dataclass
class Tracker:
    """Everything started, so a failure or Ctrl-C leaves nothing behind."""

    sandboxes: dict[str, Sandbox] = field(default_factory=dict)
    containers: set[str] = field(default_factory=set)
    processes: list[Any] = field(default_factory=list)  # sandlock Process / subprocess.Popen
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_sandbox(self, sandbox: Sandbox) -> Sandbox:
        with self.lock:
            self.sandboxes[sandbox.sandbox_id] = sandbox
        return sandbox

    def kill_sandboxes(self, ids: list[str] | None = None) -> None:
        with self.lock:
            chosen = list(self.sandboxes) if ids is None else ids
            doomed = [self.sandboxes.pop(i) for i in chosen if i in self.sandboxes]

        def kill(sandbox: Sandbox) -> None:
            try:
                sandbox.kill()
            except Exception as exc:  # the server's own teardown is the next safety net
                log(f"kill {sandbox.sandbox_id} failed: {exc}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(kill, doomed))

    def remove_containers(self) -> None:
        with self.lock:
            doomed, self.containers = list(self.containers), set()
        if doomed:
            subprocess.run(["docker", "rm", "-f", *doomed], capture_output=True, check=False)

    def stop_processes(self) -> None:
        for proc in self.processes:
            try:
                if isinstance(proc, subprocess.Popen):  # raw bwrap: its whole tree
                    for pid in reversed(process_tree(proc.pid)):
                        with suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                proc.kill()
                proc.wait()
            except Exception as exc:  # already gone
                log(f"stopping {proc!r}: {exc}")
        self.processes.clear()

    def close(self) -> None:
        self.kill_sandboxes()
        self.remove_containers()
        self.stop_processes()


class Subjects:
    """One way per subject to create a sandbox and run its first command (``cold``), and to
    start one that stays (``hold``) for round trips and idle memory."""

    def __init__(self, config: Config, tracker: Tracker) -> None:
        self.config = config
        self.tracker = tracker
        self.docker = docker.from_env()

    # -- Sandgate, through the official SDK ------------------------------------------------

    def sandgate(self, kind: str) -> Sandbox:
        server = self.config.servers[kind]
        sandbox = Sandbox.create(
            "base",
            timeout=SANDBOX_TIMEOUT_S,
            request_timeout=REQUEST_TIMEOUT_S,
            api_key=server["api_key"],
            api_url=server["url"],
            sandbox_url=server["url"],
            domain=server["domain"],
        )
        return self.tracker.add_sandbox(sandbox)

    def container_pid(self, name: str) -> int:
        return int(self.docker.api.inspect_container(name)["State"]["Pid"])

    def sandgate_pid(self, kind: str, sid: str) -> tuple[int, list[int]]:
        """A Sandgate sandbox's init on the host, and the runtime's helpers outside its cgroup
        (bubblewrap's monitor; Docker's shim is found as the init's parent)."""
        if kind == "docker":
            return self.container_pid(f"sandgate-{sid}"), []
        home = Path(self.config.servers["bwrap"]["home"])
        state = json.loads((home / "bwrap" / sid / "state.json").read_text())
        monitor = state.get("monitor_pid")
        return int(state["init_pid"]), [int(monitor)] if monitor else []

    def sandgate_cold(self, kind: str) -> Callable[[], Callable[[], None]]:
        """Timed: create + ``commands.run("true")``; the returned cleanup (kill) is not."""

        def timed() -> Callable[[], None]:
            sandbox = self.sandgate(kind)
            result = sandbox.commands.run("true")
            assert result.exit_code == 0, result
            return lambda: self.tracker.kill_sandboxes([sandbox.sandbox_id])

        return timed

    # -- raw baselines ------------------------------------------------------------------------

    def raw_bwrap_cold(self) -> Callable[[], None]:
        subprocess.run([*self.config.raw_bwrap, "/bin/true"], check=True, capture_output=True)
        return lambda: None

    def raw_docker_cold(self) -> Callable[[], None]:
        argv = ["docker", "run", "--rm", "--network", "none", self.config.image, "true"]
        subprocess.run(argv, check=True, capture_output=True)
        return lambda: None

    def docker_name(self) -> str:
        name = f"sandgate-peers-{uuid.uuid4().hex[:12]}"
        with self.tracker.lock:
            self.tracker.containers.add(name)
        return name

    def raw_docker_hold(self) -> str:
        name = self.docker_name()
        argv = ["docker", "run", "-d", "--rm", "--name", name, "--network", "none",
                self.config.image, "sleep", "infinity"]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True)
        return name

    def raw_bwrap_hold(self) -> subprocess.Popen[bytes]:
        # bubblewrap forks (its namespace's init is a second bwrap): without --die-with-parent
        # that one outlives a kill of the first and keeps the sandbox alive.
        prefix = self.config.raw_bwrap[:-1]  # the raw command line ends with "--"
        proc = subprocess.Popen([*prefix, "--die-with-parent", "--", "sleep", "infinity"])
        self.tracker.processes.append(proc)
        return proc

    def raw_bwrap_shell(self) -> subprocess.Popen[bytes]:
        """A held-open ``bash`` in a raw bwrap over the image's tree: the floor of a command
        (what the sandbox itself runs for the SDK, without any transport)."""
        prefix = self.config.raw_bwrap[:-1]
        proc = subprocess.Popen(
            [*prefix, "--die-with-parent", "--", "/bin/bash", "--norc", "--noprofile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.tracker.processes.append(proc)
        return proc

    @staticmethod
    def login_shell_command(proc: Any) -> None:
        """``bash -l -c true``, the command line the E2B SDK sends for ``commands.run("true")``
        (a login shell: the image's profile runs), and its status back."""
        proc.stdin.write(b"/bin/bash -l -c true; echo $?\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line == b"0\n", line

    # -- sandlock -----------------------------------------------------------------------------

    def sandlock_cold(self) -> Callable[[], None]:
        result = sandlock.Sandbox(**SANDLOCK_FS).run(["/bin/true"])
        assert result.exit_code == 0, result
        return lambda: None

    def sandlock_shell(self) -> Any:
        """A held-open ``bash`` in a sandlock sandbox, driven over its stdin/stdout."""
        pipe = sandlock.StdioMode.PIPED
        proc = sandlock.Sandbox(**SANDLOCK_FS).popen(
            ["/bin/bash", "--norc", "--noprofile"],
            stdin=pipe,
            stdout=pipe,
            stderr=sandlock.StdioMode.NULL,
        )
        self.tracker.processes.append(proc)
        return proc

    @staticmethod
    def shell_command(proc: Any) -> None:
        """``/bin/true`` (a fork and exec, as Sandgate's command is) and its status back."""
        proc.stdin.write(b"/bin/true; echo $?\n")
        line = proc.stdout.readline()
        assert line == b"0\n", line

    # -- llm-sandbox (Docker), pointed at the local image: no registry is reachable ----------

    def llm_session(self) -> SandboxSession:
        session = SandboxSession(
            backend="docker",
            client=self.docker,
            image=self.config.image,
            lang="python",
            skip_environment_setup=True,  # it would pip-install into a venv: no network here
            runtime_configs={"network_mode": "none", "name": self.docker_name()},
        )
        session.open()
        return session

    @staticmethod
    def llm_discard(session: SandboxSession) -> None:
        # Its close() stops the container (bash as PID 1 ignores SIGTERM: a 10 s wait per
        # sandbox), so the container is removed directly; the tracker removes it on failure too.
        session.container.remove(force=True)

    def llm_cold(self) -> Callable[[], None]:
        session = self.llm_session()
        result = session.execute_command("true")
        assert result.exit_code == 0, result
        return lambda: self.llm_discard(session)


@dataclass(frozen=True)
class SelfTimed:
    """What a subject that times itself returns: the seconds that count (a burst's, from its
    common start to its last first command, without the teardown it ran afterwards)."""

    seconds: float


def interleaved(subjects: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """``rounds`` samples of each subject, alternating subjects within a round (order shuffled
    per round). A call is timed whole and returns a cleanup, run untimed; or it returns
    ``SelfTimed``, whose seconds are the sample (a burst tears its sandboxes down inside the
    call: timing the call whole would count every kill of it)."""
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    names = list(subjects)
    for index in range(rounds):
        random.shuffle(names)
        for name in names:
            start = time.perf_counter()
            outcome = subjects[name]()
            elapsed = time.perf_counter() - start
            if isinstance(outcome, SelfTimed):
                elapsed = outcome.seconds
            elif callable(outcome):
                outcome()
            samples[name].append(elapsed)
        log(f"  round {index + 1}/{rounds}")
    return samples


def no_cleanup(call: Callable[[], Any]) -> None:
    """Runs ``call`` for its time alone: nothing to undo afterwards."""
    call()


def burst(one: Callable[[], Callable[[], None]], size: int, failures: list[str]) -> SelfTimed:
    """Wall time from a common start to the last of ``size`` concurrent ``one()`` done (or
    failed: a burst on a loaded machine can time out one create, which is a result to show,
    appended to ``failures``, not a reason to throw the run away)."""
    barrier = threading.Barrier(size + 1)
    cleanups: list[Callable[[], None]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            cleanup = one()
        except BaseException as exc:
            with lock:
                errors.append(exc)
            return
        with lock:
            cleanups.append(cleanup)

    threads = [threading.Thread(target=worker) for _ in range(size)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: c(), cleanups))
    failures.extend(repr(exc) for exc in errors)
    for exc in errors:
        log(f"  a create of the burst failed: {exc!r}")
    return SelfTimed(elapsed)


def cold_subjects(s: Subjects) -> dict[str, Callable[[], Callable[[], None]]]:
    """Each subject's cold create -> first command (the cold and the burst measures)."""
    return {
        "sandgate bwrap": s.sandgate_cold("bwrap"),
        "sandgate docker": s.sandgate_cold("docker"),
        "raw bwrap": s.raw_bwrap_cold,
        "raw docker run": s.raw_docker_cold,
        "sandlock": s.sandlock_cold,
        "llm-sandbox": s.llm_cold,
    }


def measure_cold(s: Subjects, n: int) -> dict[str, list[float]]:
    log(f"cold create -> first command, n={n} per subject")
    return interleaved(
        cold_subjects(s),
        n,
    )


def measure_burst(
    s: Subjects, bursts: int, size: int
) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """Burst wall times per subject, and the errors of the creates that failed in them."""
    log(f"bursts of {size} concurrent creates -> first commands, {bursts} per subject")
    subjects = cold_subjects(s)
    failures: dict[str, list[str]] = {k: [] for k in subjects}
    runs: dict[str, Callable[[], Any]] = {
        k: partial(burst, one, size, failures[k]) for k, one in subjects.items()
    }
    return interleaved(runs, bursts), failures


def measure_roundtrip(
    s: Subjects, count: int, cpu: dict[str, dict[str, float]]
) -> dict[str, list[float]]:
    """Round trips of every subject; fills ``cpu`` with the CPU a Sandgate command costs on
    each side (the SDK's calling thread, the gateway's process), per command."""
    log(f"command round trips on live sandboxes, n={count} per subject")
    bw, dk = s.sandgate("bwrap"), s.sandgate("docker")
    shell = s.sandlock_shell()
    floor = s.raw_bwrap_shell()
    container = s.raw_docker_hold()
    session = s.llm_session()
    client_s = {"bwrap": 0.0, "docker": 0.0}

    def sandgate_run(kind: str, sandbox: Sandbox) -> None:
        started = time.thread_time()
        sandbox.commands.run("true")
        client_s[kind] += time.thread_time() - started

    try:
        subjects: dict[str, Callable[[], Any]] = {
            "sandgate bwrap `commands.run('true')`": partial(sandgate_run, "bwrap", bw),
            "sandgate docker `commands.run('true')`": partial(sandgate_run, "docker", dk),
            "sandlock held-open shell (`/bin/true`)": lambda: s.shell_command(shell),
            "sandlock new sandbox per command": s.sandlock_cold,
            FLOOR: lambda: s.login_shell_command(floor),
            "`docker exec` (raw)": lambda: subprocess.run(
                ["docker", "exec", container, "true"], check=True, capture_output=True
            ),
            "llm-sandbox `execute_command('true')`": lambda: session.execute_command("true"),
        }
        for call in subjects.values():  # warm-up: connections, page cache
            for _ in range(5):
                call()
        client_s.update(bwrap=0.0, docker=0.0)
        gateways = {kind: int(s.config.servers[kind]["pid"]) for kind in ("bwrap", "docker")}
        before = {kind: cpu_seconds(pid) for kind, pid in gateways.items()}
        samples = interleaved({k: partial(no_cleanup, c) for k, c in subjects.items()}, count)
        for kind, pid in gateways.items():
            cpu[f"sandgate {kind}"] = {
                "client_ms": client_s[kind] / count * 1000,
                "gateway_ms": (cpu_seconds(pid) - before[kind]) / count * 1000,
            }
        return samples
    finally:
        s.tracker.kill_sandboxes([bw.sandbox_id, dk.sandbox_id])
        s.llm_discard(session)
        s.tracker.remove_containers()
        s.tracker.stop_processes()


def measure_idle(s: Subjects, count: int) -> dict[str, dict[str, Any]]:
    """Idle memory of ``count`` held sandboxes of each subject, after they settle."""
    log(f"idle memory, {count} held sandboxes per subject")
    held: dict[str, list[Any]] = {k: [] for k in
                                  ("sandgate bwrap", "sandgate docker", "raw bwrap",
                                   "raw docker", "sandlock", "llm-sandbox")}  # fmt: skip
    own = os.getpid()
    supervisor_before = pss(own)
    sessions: list[SandboxSession] = []
    try:
        for _ in range(count):
            for kind in ("bwrap", "docker"):
                sandbox = s.sandgate(kind)
                sandbox.commands.run("true")
                held[f"sandgate {kind}"].append(sandbox.sandbox_id)
            held["raw bwrap"].append(s.raw_bwrap_hold().pid)
            held["raw docker"].append(s.raw_docker_hold())
            held["sandlock"].append(s.sandlock_shell())
            session = s.llm_session()
            sessions.append(session)
            held["llm-sandbox"].append(session.container.name)
        for proc in held["sandlock"]:
            s.shell_command(proc)
        time.sleep(3.0)  # let the guests settle before reading idle memory (not a sync)
        supervisor_after = pss(own)

        out: dict[str, dict[str, Any]] = {}
        for kind in ("bwrap", "docker"):
            cg, ps = [], []
            for sid in held[f"sandgate {kind}"]:
                init, extra = s.sandgate_pid(kind, sid)
                usage, pids = cgroup_memory(init)
                if kind == "docker":
                    extra = [parent(init)]  # the containerd shim
                cg.append(usage)
                ps.append(sum(pss(p) for p in {*pids, *extra}))
            what = "its cgroup + bubblewrap's monitor" if kind == "bwrap" else "cgroup + shim"
            out[f"sandgate {kind}"] = {"cgroup": cg, "pss": ps, "pss_of": what}
        for label, names in (("raw docker", held["raw docker"]),
                             ("llm-sandbox", held["llm-sandbox"])):  # fmt: skip
            cg, ps = [], []
            for name in names:
                init = s.container_pid(name)
                usage, pids = cgroup_memory(init)
                cg.append(usage)
                ps.append(sum(pss(p) for p in {*pids, parent(init)}))
            out[label] = {"cgroup": cg, "pss": ps, "pss_of": "cgroup + shim"}
        out["raw bwrap"] = {
            "cgroup": None,
            "pss": [sum(pss(p) for p in process_tree(pid)) for pid in held["raw bwrap"]],
            "pss_of": "bwrap and its child (no cgroup of its own)",
        }
        out["sandlock"] = {
            "cgroup": None,
            "pss": [pss(proc.pid) for proc in held["sandlock"]],
            "pss_of": "the confined bash (no cgroup of its own)",
            "supervisor_per_sandbox": (supervisor_after - supervisor_before) / count,
        }
        return out
    finally:
        s.tracker.kill_sandboxes(held["sandgate bwrap"] + held["sandgate docker"])
        for session in sessions:
            s.llm_discard(session)
        s.tracker.remove_containers()
        s.tracker.stop_processes()


def measure_density(s: Subjects, steps: list[int]) -> list[dict[str, Any]]:
    """Holds growing numbers of idle Sandgate bwrap sandboxes; at each step: the last 10
    creates, MemAvailable drop per sandbox, and ``commands.run`` on a sample of them."""
    log(f"density on Sandgate bwrap, steps {steps}")
    curve: list[dict[str, Any]] = []
    held: list[Sandbox] = []
    available_before = mem_available()
    try:
        for step in steps:
            # The ramp fills a few at a time (it would take most of the run one by one on a
            # loaded machine); the last creates of each step are made alone, and timed.
            fill = step - DENSITY_TIMED - len(held)
            if fill > 0:
                with ThreadPoolExecutor(DENSITY_FILL_CONCURRENCY) as pool:
                    held.extend(pool.map(lambda _: s.sandgate("bwrap"), range(fill)))
                log(f"  {len(held)} held")
            creates: list[float] = []
            while len(held) < step:
                start = time.perf_counter()
                held.append(s.sandgate("bwrap"))
                creates.append(time.perf_counter() - start)
            drop = (available_before - mem_available()) / len(held)
            cgroups = [cgroup_memory(s.sandgate_pid("bwrap", x.sandbox_id)[0])[0] for x in held]
            sample = random.sample(held, min(30, len(held)))
            runs = []
            for sandbox in sample:
                begin = time.perf_counter()
                assert sandbox.commands.run("true").exit_code == 0
                runs.append(time.perf_counter() - begin)
            curve.append({"held": len(held), "last_creates": creates,
                          "mem_available_drop_per_sandbox": drop, "runs": runs,
                          "cgroup_mean": sum(cgroups) / len(cgroups)})  # fmt: skip
            log(f"  step {step}: {drop / 2**20:.1f} MiB MemAvailable per sandbox")
        return curve
    finally:
        s.tracker.kill_sandboxes([sandbox.sandbox_id for sandbox in held])


@contextmanager
def tracked() -> Iterator[Tracker]:
    tracker = Tracker()
    try:
        yield tracker
    finally:
        # A second Ctrl-C (or the parent's SIGTERM after the first) must not cut this short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("tearing down everything this driver started")
        tracker.close()


def on_sigterm(signum: int, frame: object) -> None:
    """``kill`` tears down like Ctrl-C does."""
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, on_sigterm)
    config = Config(**json.loads(Path(sys.argv[1]).read_text()))
    results: dict[str, Any] = {}
    with tracked() as tracker:
        s = Subjects(config, tracker)
        s.raw_docker_cold()  # warm-up: image in page cache, Docker's first-run costs
        s.sandgate_cold("bwrap")()()
        s.sandgate_cold("docker")()()
        s.llm_cold()()
        results["cold"] = measure_cold(s, config.n)
        results["burst"], results["burst_failures"] = measure_burst(
            s, config.bursts, config.burst_size
        )
        results["roundtrip_cpu"] = {}
        results["roundtrip"] = measure_roundtrip(s, config.roundtrips, results["roundtrip_cpu"])
        results["idle"] = measure_idle(s, config.idle)
        results["density"] = measure_density(s, config.density_steps)
    Path(config.out).write_text(json.dumps(results))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # torn down by then (``tracked``); no traceback for a Ctrl-C
        log("interrupted; everything this driver started is gone")
        sys.exit(130)
