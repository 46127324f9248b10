"""Host programs behind the exec tools of the promises tests: ``python3 tool_programs.py MODE``.

* ``env``: prints the environment and working directory it got (point 5);
* ``flaky KEY``: fails until its third run for KEY (counted in ``$FLAKY_DIR/KEY``; point 6);
* ``leak``: returns its secret plainly and transformed, reversed and base64 (point 9);
* ``leak_b64``: prints only the base64 of its secret;
* ``leak_fields``: returns ``{"status": "ok", "b64": <base64 of its secret>}``.
"""

import base64
import json
import os
import sys


def main() -> None:
    mode = sys.argv[1]
    if mode == "env":
        # As exec'd: Python adds LC_CTYPE to os.environ itself in a C locale.
        with open("/proc/self/environ", "rb") as handle:
            raw = [e.decode() for e in handle.read().split(b"\0") if e]
        env = dict(entry.split("=", 1) for entry in raw)
        print(json.dumps({"env": env, "cwd": os.getcwd()}))
    elif mode == "flaky":
        path = os.path.join(os.environ["FLAKY_DIR"], sys.argv[2])
        with open(path, "a") as handle:
            handle.write("x")
        attempt = os.path.getsize(path)
        if attempt < 3:
            print(f"attempt {attempt} failed", file=sys.stderr)
            sys.exit(1)
        print(attempt)
    else:
        secret = os.environ["CANARY"]
        b64 = base64.b64encode(secret.encode()).decode()
        if mode == "leak":
            print(json.dumps({"plain": secret, "reversed": secret[::-1], "b64": b64}))
        elif mode == "leak_b64":
            print(b64)
        else:
            print(json.dumps({"status": "ok", "b64": b64}))


if __name__ == "__main__":
    main()
