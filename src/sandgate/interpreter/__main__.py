"""``python3 -m sandgate.interpreter``: serve on ``SANDGATE_INTERPRETER_PORT`` (49999).

The default Python kernel is started first (``_prestart``: standard library only), so that
it loads while the server imports what it needs."""

from ._prestart import prestart

prestarted = prestart()

from .server import main  # noqa: E402 - after the prestart, on purpose

main(prestarted)
