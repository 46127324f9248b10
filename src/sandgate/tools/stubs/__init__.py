"""Generated in-sandbox clients: commands on PATH, a Python package and a JS/TS module.

Layout written under ``<host_dir>/tools`` (``/run/sandgate/tools`` inside)::

    bin/<tool>                       one executable per tool (python3), ``--help`` = schema
    python/sandgate_tools/           ``import sandgate_tools as tools; tools.kv.get(key=...)``
    js/sandgate_tools.js, .d.ts      ``require('sandgate_tools').kv.get({key: ...})``

Only the tools the policy could allow for the sandbox are generated. The wire protocol they
speak is documented in ``tools.socket``.
"""

from sandgate.tools.stubs.generate import write_stubs

__all__ = ["write_stubs"]
