"""The guest: the stdlib-only daemon inside every sandbox, and how the gateway ships it.

The gateway talks to a running guest with :class:`sandgate.guest.client.GuestClient`
(imported from its module: the daemon never imports the client). The wire format is
:mod:`sandgate.guest.protocol`.
"""

from ._zipapp import build_zipapp

__all__ = ["build_zipapp"]
