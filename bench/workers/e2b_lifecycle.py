"""Runs inside an official e2b SDK environment; prints one JSON object of raw timings.

argv: sequential_count burst_size roundtrip_count template
"""

import json
import sys
import threading
import time

from e2b import Sandbox


def create_and_first_command(template: str) -> tuple[float, bool]:
    start = time.perf_counter()
    try:
        sandbox = Sandbox.create(template)
        ok = sandbox.commands.run("true").exit_code == 0
    except Exception:  # a failure is a data point here
        return time.perf_counter() - start, False
    elapsed = time.perf_counter() - start
    sandbox.kill()
    return elapsed, ok


def main() -> None:
    sequential, burst, roundtrips, template = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
    )
    create_and_first_command(template)  # warm-up: connections, imports, page cache
    seq = [create_and_first_command(template) for _ in range(sequential)]

    results: list[tuple[float, bool]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(max(burst, 1))

    def one() -> None:
        barrier.wait()
        outcome = create_and_first_command(template)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(burst)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    rtt = []
    if roundtrips == 0:
        print(
            json.dumps(
                {
                    "sequential": [t for t, ok in seq if ok],
                    "sequential_failures": sum(not ok for _, ok in seq),
                    "burst": [t for t, ok in results if ok],
                    "burst_failures": sum(not ok for _, ok in results),
                    "roundtrip": rtt,
                }
            )
        )
        return
    sandbox = Sandbox.create(template)
    for _ in range(10):
        sandbox.commands.run("true")
    for _ in range(roundtrips):
        start = time.perf_counter()
        sandbox.commands.run("true")
        rtt.append(time.perf_counter() - start)
    sandbox.kill()
    print(
        json.dumps(
            {
                "sequential": [t for t, ok in seq if ok],
                "sequential_failures": sum(not ok for _, ok in seq),
                "burst": [t for t, ok in results if ok],
                "burst_failures": sum(not ok for _, ok in results),
                "roundtrip": rtt,
            }
        )
    )


main()
