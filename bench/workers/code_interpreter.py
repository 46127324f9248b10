"""Runs inside an official e2b-code-interpreter environment; prints one JSON object of raw
timings (seconds).

argv: fresh_count roundtrip_count
"""

import json
import sys
import time

from e2b_code_interpreter import Sandbox


def fresh(count: int) -> dict[str, list[float]]:
    """Create → first ``run_code("1+1")`` result, and the first call alone, per sandbox."""
    create_to_result: list[float] = []
    first_call: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        sandbox = Sandbox.create()
        created = time.perf_counter()
        execution = sandbox.run_code("1+1")
        done = time.perf_counter()
        if execution.text != "2":
            raise SystemExit(f"unexpected result {execution!r}")
        create_to_result.append(done - start)
        first_call.append(done - created)
        sandbox.kill()
    return {"create_to_first_result": create_to_result, "first_call": first_call}


def roundtrips(count: int) -> list[float]:
    sandbox = Sandbox.create()
    try:
        for _ in range(5):
            sandbox.run_code("1+1")
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            execution = sandbox.run_code("1+1")
            samples.append(time.perf_counter() - start)
            if execution.text != "2":
                raise SystemExit(f"unexpected result {execution!r}")
        return samples
    finally:
        sandbox.kill()


def main() -> None:
    fresh_count, roundtrip_count = int(sys.argv[1]), int(sys.argv[2])
    results = fresh(fresh_count)
    results["roundtrip"] = roundtrips(roundtrip_count) if roundtrip_count else []
    print(json.dumps(results))


if __name__ == "__main__":
    main()
