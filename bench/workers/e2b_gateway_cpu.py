"""Runs inside an official e2b SDK environment, driven over stdin/stdout by bench/gateway_cpu.py.

argv: template commands stream_mib

Creates one sandbox and warms it, prints ``ready``; then for each line the driver sends
(``commands`` or ``stream``) runs that block and prints one JSON line: the block's wall time
and, for commands, each ``commands.run("true")``'s. The driver reads the gateway's CPU time
around each block. ``floor`` times ``bash -l -c true`` inside the sandbox (no transport).
"""

import json
import sys
import time

from e2b import Sandbox

FLOOR = (
    "python3 -c 'import subprocess, time\n"
    "xs = []\n"
    "for _ in range(100):\n"
    '    a = time.perf_counter(); subprocess.run(["bash", "-l", "-c", "true"]); '
    "xs.append(time.perf_counter() - a)\n"
    "print(sorted(xs)[50])'"
)


def main() -> None:
    template, commands, stream_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sandbox = Sandbox.create(template, timeout=1800)
    try:
        run = sandbox.commands.run
        for _ in range(20):  # warm-up: connections, the guest's user worker
            run("true")
        print("ready", flush=True)
        for line in sys.stdin:
            block = line.strip()
            start = time.perf_counter()
            samples: list[float] = []
            if block == "commands":
                for _ in range(commands):
                    at = time.perf_counter()
                    run("true")
                    samples.append(time.perf_counter() - at)
            elif block == "stream":
                received = 0

                def count(data: str) -> None:
                    nonlocal received
                    received += len(data)

                run(f"head -c {stream_mib}M /dev/zero", on_stdout=count, timeout=0)
                assert received == stream_mib * 1024 * 1024, received
            elif block == "floor":
                samples.append(float(run(FLOOR).stdout))
            else:
                raise SystemExit(f"unknown block {block!r}")
            wall = time.perf_counter() - start
            print(json.dumps({"wall": wall, "samples": samples}), flush=True)
    finally:
        sandbox.kill()


if __name__ == "__main__":
    main()
