"""Runs inside an official e2b SDK environment; prints one JSON object of raw timings.

argv: roundtrip_count stream_mib transfer_mib repeats template
"""

import json
import os
import sys
import time

from e2b import Sandbox


def main() -> None:
    roundtrips, stream_mib, transfer_mib, repeats = (int(a) for a in sys.argv[1:5])
    template = sys.argv[5]
    sandbox = Sandbox.create(template, timeout=1800)
    try:
        run = sandbox.commands.run
        for _ in range(20):  # warm-up: connections, the guest's user worker
            run("true")
        samples = []
        for _ in range(roundtrips):
            start = time.perf_counter()
            run("true")
            samples.append(time.perf_counter() - start)

        streams = []
        for _ in range(repeats):
            received = 0

            def count(data: str) -> None:
                nonlocal received
                received += len(data)

            start = time.perf_counter()
            run(f"head -c {stream_mib}M /dev/zero", on_stdout=count, timeout=0)
            streams.append(time.perf_counter() - start)
            assert received == stream_mib * 1024 * 1024, received

        payload = os.urandom(transfer_mib * 1024 * 1024)
        uploads, downloads = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            sandbox.files.write("/home/user/bench.bin", payload, request_timeout=600)
            uploads.append(time.perf_counter() - start)
            start = time.perf_counter()
            data = sandbox.files.read("/home/user/bench.bin", format="bytes", request_timeout=600)
            downloads.append(time.perf_counter() - start)
            assert len(data) == len(payload)
    finally:
        sandbox.kill()
    print(
        json.dumps(
            {"roundtrip": samples, "stream": streams, "upload": uploads, "download": downloads}
        )
    )


if __name__ == "__main__":
    main()
