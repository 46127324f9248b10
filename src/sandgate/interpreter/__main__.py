"""``python3 -m sandgate.interpreter``: serve on ``SANDGATE_INTERPRETER_PORT`` (49999)."""

from .server import main

main()
