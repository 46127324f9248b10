"""Sandgate side by side with what a user would pick instead (issue 17), interleaved in one run.

Usage: ``uv run python bench/peers.py [--n 20] [--bursts 3] [--roundtrips 200] [--idle 10]
[--density-max 500] [--no-doc] [--from-results]`` (as root, Docker running, the ``base``
template built).

Subjects: Sandgate's bwrap and Docker runtimes through the official Python SDK (e2b 2.63.0),
raw ``bwrap --unshare-all … true``, raw ``docker run --rm --network none IMAGE true``,
``sandlock`` (Landlock + seccomp process sandbox) and ``llm-sandbox`` (Docker), the last two
pointed at what exists locally (the host's directories; the ``base`` template's image). The
peers and the SDK live in their own locked environment, ``bench/peers`` (pyproject + uv.lock),
not in Sandgate's dependencies: this script builds it (``uv sync --frozen``), starts one server
per runtime (fresh homes), and runs ``bench/workers/peers_driver.py`` there, which measures
every subject alternately sample by sample. Writes ``bench/results/peers.json`` and the
"Side by side with the peers (issue 17)" section of docs/benchmarks.md.

Leaves nothing running: the driver tears down what it started (also on error and Ctrl-C), then
this script deletes whatever sandboxes its servers still list and stops the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.fixtures.runtimes import runtime_env
from tests.fixtures.server import SANDBOX_DOMAIN, TEST_ROOTFS_DIR, RunningServer, ServerFactory

from bench._report import ROOT, machine, summary_ms, write_results, write_section
from bench.bwrap import IMAGE, raw_bwrap_argv

PEERS = ROOT / "bench" / "peers"
DRIVER = ROOT / "bench" / "workers" / "peers_driver.py"
SECTION = "Side by side with the peers (issue 17)"
MIB = 1024 * 1024
DENSITY_STEPS = (50, 100, 200, 500)
#: Names of the containers the driver starts (raw Docker, llm-sandbox); see peers_driver.py.
CONTAINER_PREFIX = "sandgate-peers-"

#: The command floor's row (the driver, bench/workers/peers_driver.py, names it so).
FLOOR = "floor: `bash -l -c true` in a held-open shell (raw bwrap, same image)"
#: Which raw baseline each subject's ratio is taken against.
BASELINE = {
    "sandgate bwrap": "raw bwrap",
    "sandlock": "raw bwrap",
    "raw bwrap": "raw bwrap",
    "sandgate docker": "raw docker run",
    "llm-sandbox": "raw docker run",
    "raw docker run": "raw docker run",
}


def peers_python() -> Path:
    """The peers' interpreter, built from their lock (no resolution: the lock is the truth)."""
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in $UV
    if uv is None:
        raise SystemExit("uv is not on PATH; it builds the peers' environment (bench/peers)")
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PYTHON"}}
    subprocess.run([uv, "sync", "--frozen", "--project", str(PEERS)], check=True, env=env)
    return PEERS / ".venv" / "bin" / "python"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def sweep(server: RunningServer) -> int:
    """Deletes every sandbox ``server`` still lists (the driver's own teardown comes first);
    returns how many there were."""
    with httpx.Client(headers={"X-API-Key": server.api_key}, timeout=60) as client:
        listed = client.get(f"{server.url}/sandboxes")
        listed.raise_for_status()
        left = [item["sandboxID"] for item in listed.json()]
        for sid in left:
            client.delete(f"{server.url}/sandboxes/{sid}")
    return len(left)


def reap_bwrap(home: Path) -> int:
    """Kills, through the runtime itself, any bwrap sandbox of the stopped server at ``home``:
    a create in flight when the driver was stopped can finish after the sweep's listing, and
    sandboxes outlive their server by design (the test fixture reaps only Docker's)."""
    from sandgate.runtimes.bwrap import BwrapRuntime

    instance = home / "instance-id"
    if not instance.exists():
        return 0
    runtime = BwrapRuntime(instance.read_text().strip(), home=home, rootfs_dir=TEST_ROOTFS_DIR)

    async def reap() -> int:
        found = await runtime.list()
        for sandbox in found:
            await runtime.kill(sandbox.sandbox_id)
        return len(found)

    return asyncio.run(reap())


def on_sigterm(signum: int, frame: object) -> None:
    """``kill`` tears down like Ctrl-C does."""
    raise KeyboardInterrupt


def run_driver(args: argparse.Namespace, python: Path, base_dir: Path) -> dict[str, Any]:
    factory = ServerFactory(base_dir)
    servers: dict[str, RunningServer] = {}
    limits = {
        "SANDGATE_LIMITS__MAX_SANDBOXES_PER_TEAM": str(max(args.density_max, 100) + 50),
        "SANDGATE_LIMITS__MAX_SANDBOXES_TOTAL": str(max(args.density_max, 100) + 50),
    }
    try:
        for kind in ("bwrap", "docker"):
            servers[kind] = factory(extra_env={**runtime_env(kind), **limits})
        out = base_dir / "samples.json"
        config = {
            "servers": {
                kind: {
                    "api_key": s.api_key,
                    "url": s.url,
                    "domain": SANDBOX_DOMAIN,
                    "home": str(s.home),
                    "pid": str(s.process.pid if s.process is not None else 0),
                }
                for kind, s in servers.items()
            },
            "image": IMAGE,
            "raw_bwrap": raw_bwrap_argv(),
            "n": args.n,
            "bursts": args.bursts,
            "burst_size": args.burst_size,
            "roundtrips": args.roundtrips,
            "idle": args.idle,
            "density_steps": [s for s in DENSITY_STEPS if s < args.density_max]
            + [args.density_max],
            "out": str(out),
        }
        (base_dir / "config.json").write_text(json.dumps(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "VIRTUAL_ENV"))}
        driver = subprocess.Popen([str(python), str(DRIVER), str(base_dir / "config.json")],
                                  env=env)  # fmt: skip
        try:
            code = driver.wait()
        except KeyboardInterrupt:
            # The driver got the same SIGINT and is tearing down what it started: let it
            # finish (subprocess.run would SIGKILL it a quarter of a second later).
            print("interrupted: waiting for the driver's teardown", file=sys.stderr)
            if driver.poll() is None:  # it ignores a second signal once tearing down
                driver.send_signal(signal.SIGTERM)
            driver.wait(timeout=600)
            raise
        if code != 0:
            raise SystemExit(f"the peers driver failed (exit {code}); see its output above")
        result: dict[str, Any] = json.loads(out.read_text())
        return result
    finally:
        for kind, server in servers.items():
            try:
                left = sweep(server)
            except httpx.HTTPError as exc:
                print(f"could not list {kind} sandboxes: {exc}", file=sys.stderr)
                continue
            if left:
                print(f"deleted {left} {kind} sandboxes the driver left", file=sys.stderr)
        factory.close()
        if "bwrap" in servers:
            raced = reap_bwrap(servers["bwrap"].home)
            if raced:
                print(f"killed {raced} bwrap sandboxes created while stopping", file=sys.stderr)
        leftover = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"name={CONTAINER_PREFIX}"],
            capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
        if leftover:
            print(f"removing {len(leftover)} peer containers the driver left", file=sys.stderr)
            subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True, check=False)


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f} x" if base > 0 else "n/a"


def table_latency(samples: dict[str, list[float]], base_of: dict[str, str], unit: str) -> str:
    stats = {name: summary_ms(values) for name, values in samples.items()}
    lines = [f"| subject | p50 ({unit}) | p95 ({unit}) | ratio (p50) to |", "|---|---|---|---|"]
    for name, s in stats.items():
        base = base_of[name]
        lines.append(
            f"| {name} | {s['p50']:.1f} | {s['p95']:.1f} | "
            f"{ratio(s['p50'], stats[base]['p50'])} {base} |"
        )
    return "\n".join(lines)


def table_burst(samples: dict[str, list[float]], failures: dict[str, list[str]]) -> str:
    median = {name: statistics.median(values) for name, values in samples.items()}
    lines = ["| subject | median wall time (s) | runs (s) | failed creates | ratio to |",
             "|---|---|---|---|---|"]  # fmt: skip
    for name, value in median.items():
        base = BASELINE[name]
        runs = ", ".join(f"{v:.2f}" for v in samples[name])
        lines.append(
            f"| {name} | {value:.2f} | {runs} | {len(failures.get(name, []))} | "
            f"{ratio(value, median[base])} {base} |"
        )
    return "\n".join(lines)


def table_idle(idle: dict[str, dict[str, Any]]) -> str:
    lines = ["| subject | memory cgroup (MiB, mean) | PSS (MiB, mean) | PSS of |",
             "|---|---|---|---|"]  # fmt: skip
    for name, data in idle.items():
        cgroup = statistics.fmean(data["cgroup"]) / MIB if data["cgroup"] else None
        note = data["pss_of"]
        if "supervisor_per_sandbox" in data:
            note += f"; + {data['supervisor_per_sandbox'] / MIB:.2f} MiB per sandbox in the "
            note += "supervisor (the calling Python process, PSS growth over the run)"
        cg = f"{cgroup:.2f}" if cgroup is not None else "— (none)"
        lines.append(f"| {name} | {cg} | {statistics.fmean(data['pss']) / MIB:.2f} | {note} |")
    return "\n".join(lines)


def table_density(curve: list[dict[str, Any]]) -> str:
    lines = ["| held | create p50 / p95, last 10 (ms) | MemAvailable drop per sandbox (MiB) | "
             "memory cgroup per sandbox (MiB, mean) | "
             "`commands.run` p50 / p95 on a sample (ms, n) |", "|---|---|---|---|---|"]  # fmt: skip
    for step in curve:
        c, r = summary_ms(step["last_creates"]), summary_ms(step["runs"])
        lines.append(
            f"| {step['held']} | {c['p50']:.0f} / {c['p95']:.0f} | "
            f"{step['mem_available_drop_per_sandbox'] / MIB:.1f} | "
            f"{step['cgroup_mean'] / MIB:.1f} | "
            f"{r['p50']:.1f} / {r['p95']:.1f} ({len(step['runs'])}) |"
        )
    return "\n".join(lines)


def verdicts(res: dict[str, Any]) -> list[str]:
    """One plain line per target of issue 17 this run measures, and where the others live."""
    cold = {k: summary_ms(v)["p50"] for k, v in res["cold"].items()}
    burst = {k: statistics.median(v) for k, v in res["burst"].items()}
    rtt = {k: summary_ms(v)["p50"] for k, v in res["roundtrip"].items()}
    idle = {k: statistics.fmean(v["cgroup"]) / MIB for k, v in res["idle"].items() if v["cgroup"]}
    top = res["density"][-1]

    def met(ok: bool) -> str:
        return "**met**" if ok else "**not met**"

    sg_rtt = rtt["sandgate bwrap `commands.run('true')`"]
    shell = rtt["sandlock held-open shell (`/bin/true`)"]
    floor = rtt.get(FLOOR)
    if floor is None:  # results of a run before the floor was measured
        floor_line = "the floor was not measured in this run"
    else:
        cpu = res.get("roundtrip_cpu", {}).get("sandgate bwrap")
        spent = ""
        if cpu is not None:
            spent = (
                f"; per command the SDK's calling thread used {cpu['client_ms']:.1f} ms of CPU "
                f"and the gateway process {cpu['gateway_ms']:.1f} ms (the whole process over "
                "the run: its background ticks and the audit writer included, not all of it "
                "on the command's path, so the two do not add up to the latency)"
            )
        floor_line = (
            f"against the floor measured in this run, `bash -l -c true` in a shell held open "
            f"over the same image with no transport ({floor:.1f} ms p50; the login shell the "
            f"SDK asks for is {floor - shell:.1f} ms of it over a bare fork and exec), "
            f"Sandgate is {sg_rtt / floor:.2f} x — {met(sg_rtt <= 2 * floor)} (≤ 2 x): it adds "
            f"{sg_rtt - floor:.1f} ms{spent}"
        )
    top_create = summary_ms(top["last_creates"])["p95"]
    top_run = summary_ms(top["runs"])["p50"]
    return [
        f"- 1, idle ≤ 6 MiB per sandbox (cgroup): bwrap {idle['sandgate bwrap']:.1f} MiB, "
        f"Docker {idle['sandgate docker']:.1f} MiB — "
        f"{met(max(idle['sandgate bwrap'], idle['sandgate docker']) <= 6)}.",
        f"- 1, bwrap cold create → first command ≤ 50 ms p50: {cold['sandgate bwrap']:.0f} ms "
        f"— {met(cold['sandgate bwrap'] <= 50)}.",
        f"- 1, Docker cold ≤ 1.1 x raw `docker run … true`: "
        f"{cold['sandgate docker'] / cold['raw docker run']:.2f} x — "
        f"{met(cold['sandgate docker'] <= 1.1 * cold['raw docker run'])}.",
        f"- 2, burst of {res['burst_size']} on bwrap ≤ 4 x raw `bwrap`: "
        f"{burst['sandgate bwrap'] / burst['raw bwrap']:.1f} x — "
        f"{met(burst['sandgate bwrap'] <= 4 * burst['raw bwrap'])}.",
        f"- 2, burst on Docker ≤ 1.05 x raw `docker run`: "
        f"{burst['sandgate docker'] / burst['raw docker run']:.2f} x — "
        f"{met(burst['sandgate docker'] <= 1.05 * burst['raw docker run'])}.",
        f"- 3, density: {top['held']} idle bwrap sandboxes held (target 500), create p95 "
        f"{top_create:.0f} ms (target < 1000), `commands.run` p50 {top_run:.1f} ms on a sample "
        f"(target < 20) — "
        f"{met(top['held'] >= 500 and top_create < 1000 and top_run < 20)}.",
        f"- 5, `commands.run('true')` ≤ 5 ms p50: {sg_rtt:.1f} ms — {met(sg_rtt <= 5)} (for a "
        "quiet machine; see the load average above); ≤ 2 x a held-open `sandlock` shell: "
        f"{sg_rtt / shell:.1f} x — {met(sg_rtt <= 2 * shell)}; {floor_line}.",
        "- 4 (tool calls), 6 (code interpreter cold start) and 7 (suite time) are not measured "
        'here: see the sections "Tool calls" and "Code interpreter", and the suite\'s own log.',
    ]


def write_doc(res: dict[str, Any], args: argparse.Namespace) -> None:
    smoke = ""
    if args.smoke:
        smoke = ("**Smoke run** (small counts, to prove the harness works; not the figures of "
                 "record — the full run replaces this section).\n\n")  # fmt: skip
    rtt_base = {name: "`docker exec` (raw)" for name in res["roundtrip"]}
    rtt_base["sandgate bwrap `commands.run('true')`"] = "sandlock held-open shell (`/bin/true`)"
    body = f"""
{smoke}Measured {res["when"]} on {res["machine"]}; load average {res["load_start"]} at start,
{res["load_end"]} at end (1/5/15 min). Every measure alternates its subjects sample by sample
(order shuffled per round), so the ratios hold on a shared machine even when the absolute
figures move. Sandgate goes through the official Python SDK (`e2b==2.63.0`, its client-side
time included), cold (no warm pool), template `base`. `llm-sandbox` 0.3.46 and raw Docker use
the same image (`{IMAGE}`, local: nothing is pulled); raw `bwrap --unshare-all` runs in that
image's root file system; `sandlock` 0.9.0 confines a process on the host's own directories
(it has no image root). Peers and SDK are locked in `bench/peers` (not Sandgate's dependencies).
Reproduce: `{res["command"]}`.

### Cold create → first command done (n={args.n} per subject)

Sandgate: `Sandbox.create` + `commands.run("true")`; raw: one `… true` process;
`sandlock`: `Sandbox(...).run(["/bin/true"])`; `llm-sandbox`: `SandboxSession.open()` +
`execute_command("true")` (environment set-up skipped: it would pip-install).

{table_latency(res["cold"], BASELINE, "ms")}

### Burst: {args.burst_size} concurrent creates → all first commands done (bursts: {args.bursts})

A failed create still ends its burst (its time is counted); the errors are in
`bench/results/peers.json`.

{table_burst(res["burst"], res["burst_failures"])}

### Command round trip on a live sandbox (n={args.roundtrips} per subject)

Sandgate's `commands.run("true")` runs `bash -l -c true` in the sandbox; the held-open
`sandlock` shell runs `/bin/true; echo $?` (a fork and exec, as Sandgate's is) in one `bash`
kept open over pipes; a new `sandlock` sandbox per command is `Sandbox(...).run(["/bin/true"])`.
The floor runs what the sandbox runs for the SDK, `bash -l -c true` (a login shell: the image's
profile), from a `bash` held open in a raw `bwrap` over the same image, with no transport.

{table_latency(res["roundtrip"], rtt_base, "ms")}

### Idle memory ({args.idle} held sandboxes of each, after 3 s)

cgroup where the subject has one (Sandgate's and Docker's memory cgroup: includes tmpfs pages
and page cache charged to it); PSS of the processes named otherwise.

{table_idle(res["idle"])}

### Density on Sandgate bwrap (held idle, up to {args.density_max})

Each step fills 4 creates at a time up to 10 short of its count, then makes the last 10 one
at a time: those are the create figures (`Sandbox.create` alone). MemAvailable drop is
host-wide since the ramp began, per held sandbox (other work on the host moves it, even below
zero: read it next to the sandboxes' own memory cgroups, mean over all held);
`commands.run("true")` runs once on each of up to 30 held sandboxes drawn at random at each
step. All are killed at the end.

{table_density(res["density"])}

### Targets of issue 17 (this run)

{chr(10).join(verdicts(res))}
"""
    write_section(SECTION, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="cold creates per subject")
    parser.add_argument("--bursts", type=int, default=3, help="bursts per subject (median)")
    parser.add_argument("--burst-size", type=int, default=20)
    parser.add_argument("--roundtrips", type=int, default=200, help="commands per subject")
    parser.add_argument("--idle", type=int, default=10, help="held sandboxes per subject")
    parser.add_argument("--density-max", type=int, default=500, help="top step of the ramp")
    parser.add_argument("--smoke", action="store_true", help="mark the doc section a smoke run")
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON results")
    parser.add_argument(
        "--from-results",
        action="store_true",
        help="measure nothing: rewrite the doc section from bench/results/peers.json (give "
        "the counts that run used, if not the defaults)",
    )
    args = parser.parse_args()
    if args.from_results:
        res = json.loads((ROOT / "bench" / "results" / "peers.json").read_text())
        write_doc(res, args)
        print("\n".join(verdicts(res)))
        return
    if min(args.n, args.bursts, args.burst_size, args.roundtrips, args.idle) < 1:
        parser.error("every count must be at least 1")
    if args.density_max < 10:
        parser.error("--density-max must be at least 10 (each step reports its last 10 creates)")

    signal.signal(signal.SIGTERM, on_sigterm)
    python = peers_python()
    load_start = loadavg()
    with tempfile.TemporaryDirectory(prefix="sgp", dir="/tmp") as base_dir:
        res = run_driver(args, python, Path(base_dir))
    command = "uv run python bench/peers.py"
    defaults = {"n": 20, "bursts": 3, "burst_size": 20, "roundtrips": 200, "idle": 10,
                "density_max": 500}  # fmt: skip
    for key, default in defaults.items():
        if getattr(args, key) != default:
            command += f" --{key.replace('_', '-')} {getattr(args, key)}"
    res.update(when=datetime.now(UTC).isoformat(timespec="seconds"), machine=machine(),
               load_start=load_start, load_end=loadavg(), command=command,
               burst_size=args.burst_size)  # fmt: skip
    write_results("peers.json", res)
    if not args.no_doc:
        write_doc(res, args)
    print("\n".join(verdicts(res)))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: no results written; sandboxes and servers are stopped", file=sys.stderr)
        sys.exit(130)
