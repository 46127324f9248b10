"""Runs inside an official e2b SDK environment; prints one JSON object of raw timings.

argv: rounds per_block template

One sandbox; its /etc/profile alternates, block by block, between the template's (which asks
bash for ``$EUID``) and Debian's (which forks ``id -u``), rebuilt from it with ``sed``. Each
block times ``commands.run("true")`` through the SDK, then a loop of ``bash -l -c true``
inside the sandbox (no transport: the login shell alone).
"""

import json
import sys
import time

from e2b import Sandbox

SHIPPED = '"${EUID:-$(id -u)}"'
DEBIAN = '"$(id -u)"'
INSIDE = (
    "python3 -c 'import subprocess, time\n"
    "xs = []\n"
    "for _ in range(50):\n"
    '    a = time.perf_counter(); subprocess.run(["bash", "-l", "-c", "true"]); '
    "xs.append(time.perf_counter() - a)\n"
    "print(sorted(xs)[25])'"
)


def main() -> None:
    rounds, per_block = int(sys.argv[1]), int(sys.argv[2])
    sandbox = Sandbox.create(sys.argv[3], timeout=1800)
    try:
        run = sandbox.commands.run
        prepared = run(
            "set -e; cp /etc/profile /tmp/profile.shipped; "
            f"sed 's/\"\\${{EUID:-\\$(id -u)}}\"/{DEBIAN}/g' /etc/profile > /tmp/profile.debian; "
            "grep -c 'EUID' /tmp/profile.shipped; grep -c 'EUID' /tmp/profile.debian || true",
            user="root",
        )
        counts = prepared.stdout.split()
        if counts[0] == "0" or counts[1] != "0":
            raise SystemExit(f"the template's /etc/profile does not ask for {SHIPPED}: {counts}")
        for _ in range(20):  # warm-up: connections, the guest's user worker
            run("true")
        samples: dict[str, list[float]] = {"shipped": [], "debian": []}
        inside: dict[str, list[float]] = {"shipped": [], "debian": []}
        for index in range(rounds):
            order = ("shipped", "debian") if index % 2 == 0 else ("debian", "shipped")
            for variant in order:
                run(f"cp /tmp/profile.{variant} /etc/profile", user="root")
                for _ in range(5):
                    run("true")
                for _ in range(per_block):
                    start = time.perf_counter()
                    run("true")
                    samples[variant].append(time.perf_counter() - start)
                inside[variant].append(float(run(INSIDE).stdout))
        run("cp /tmp/profile.shipped /etc/profile", user="root")
        print(json.dumps({"sdk": samples, "inside": inside}))
    finally:
        sandbox.kill()


if __name__ == "__main__":
    main()
