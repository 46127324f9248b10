"""Starts an IPython kernel as ``python -m ipykernel_launcher`` does, less three imports a
kernel of the code interpreter does not use at start. Each is a large share of the kernel's
start, which every fresh sandbox waits for (on this project's test machine: ~275 ms of
imports with all three avoided ~185 ms, debugpy's already avoided before):

* ``debugpy`` (and, through it, ``pkg_resources``): ipykernel's debugger, which no E2B client
  speaks. Refused while ipykernel loads, importable by user code afterwards.
* ``jedi``: IPython's completer uses it when it is importable at load. Refused while IPython
  loads, so completions (which no E2B client asks for) use IPython's own completer; user code
  can still import jedi.
* ``IPython.terminal.embed`` (and, through it, ``prompt_toolkit`` and the terminal shell):
  ``import IPython`` loads it only to offer ``IPython.embed``, a terminal shell a kernel has
  no terminal for. A stand-in takes its place while IPython loads; ``IPython.embed`` and any
  other name asked of it load the real module then, and ``import IPython.terminal.embed``
  loads it as usual once the kernel has started.

The server runs this file as a script with the template's ``python3`` (``_kernel``), as the
context's user. Standard library only: nothing of Sandgate's is importable here, and its own
directory leaves ``sys.path`` before anything is imported (like ipykernel's launcher, which
drops the working directory; IPython puts that back).
"""

from __future__ import annotations

import importlib
import os
import sys
import types

__all__ = ["REFUSED", "main"]

REFUSED = ("debugpy", "jedi")
_EMBED = "IPython.terminal.embed"


def _stand_in() -> types.ModuleType:
    """A module that becomes ``IPython.terminal.embed`` the first time anything of it is
    used (its ``embed`` when called, any other name when read)."""
    stand_in = types.ModuleType(_EMBED, "IPython.terminal.embed, loaded on first use")

    def real() -> types.ModuleType:
        if sys.modules.get(_EMBED) is stand_in:
            del sys.modules[_EMBED]
        return importlib.import_module(_EMBED)

    def embed(**kwargs: object) -> object:
        return real().embed(**kwargs)

    def __getattr__(name: str) -> object:
        if name.startswith("__"):  # the import system's probes (``__path__``, ...)
            raise AttributeError(name)
        return getattr(real(), name)

    embed.__module__, embed.__qualname__ = _EMBED, "embed"
    stand_in.embed = embed  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    return stand_in


def main() -> None:
    here = {os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.realpath(__file__))}
    if sys.path and sys.path[0] in here:  # not there under -P or PYTHONSAFEPATH
        del sys.path[0]
    stand_in = _stand_in()
    for name in REFUSED:
        sys.modules[name] = None  # type: ignore[assignment]
    sys.modules.setdefault(_EMBED, stand_in)
    try:
        from ipykernel import kernelapp
    finally:
        for name in REFUSED:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        if sys.modules.get(_EMBED) is stand_in:
            del sys.modules[_EMBED]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
