"""Runs inside an official e2b SDK environment: creates sandboxes one after another, each
followed by ``commands.run("true")``, when told to, so that the caller can record the host
around exactly that (``bench/create_cpu.py``).

First it creates ``count`` sandboxes, all running at the end, and kills them (warm-up:
connections, imports, page cache, and the server's per-slot set-up, made once per uid slot and
process, which a server that has run that many sandboxes at once has done already), then
prints ``ready``. Each
line it then reads starts a round: ``count`` sequential creates + first commands, kept
running until the round ends (so each takes a slot of its own, as in a burst), then
``done``; the sandboxes are killed after the next line (outside the recording), and the
round's failures, if any, are printed as ``failed: ...``. End of input ends it.

argv: count template
"""

import sys

from e2b import Sandbox


def main() -> None:
    count, template = int(sys.argv[1]), sys.argv[2]
    warm = [Sandbox.create(template) for _ in range(count)]
    for sandbox in warm:
        sandbox.kill()
    print("ready", flush=True)
    while sys.stdin.readline():
        sandboxes, failures = [], []
        for _ in range(count):
            try:
                sandbox = Sandbox.create(template)
                sandboxes.append(sandbox)
                exit_code = sandbox.commands.run("true").exit_code
                if exit_code != 0:
                    raise RuntimeError(f"`true` exited {exit_code}")
            except Exception as exc:  # a failure is reported, the round goes on
                failures.append(repr(exc)[:300])
        print("done" if not failures else f"failed: {failures}", flush=True)
        sys.stdin.readline()
        for sandbox in sandboxes:
            sandbox.kill()
        print("killed", flush=True)


if __name__ == "__main__":
    main()
