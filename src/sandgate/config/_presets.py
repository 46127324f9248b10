"""Named egress presets: one word in a rule list for the hosts a tool needs.

A preset is written as a bare word in any egress rule list (``egress.allow: [pypi]``). It can
never be mistaken for a host: every name a preset stands for has a dot, and a bare word (no
dot, no ``:port``, no ``*``) is *always* read as a preset name, so an unknown one is a config
error that lists the known ones. A single-label host (``minio``) is written in the object form
(``{host: minio}``) or with its ports (``minio:9000``).

The hosts are the ones each tool's default configuration talks to; broad shared hosts (a
whole CDN, ``*.githubusercontent.com``) are left out on purpose, since anything a sandbox can
reach it can also send data to (NET-17).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["PACKAGE_REGISTRIES", "PRESETS", "preset_of"]

_TLS: Final = (443,)
_HTTP_AND_TLS: Final = (80, 443)

#: Preset name → (host pattern, ports) pairs.
PRESETS: Final[Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]]] = MappingProxyType(
    {
        # pip, uv, poetry: the index (/simple) and the files it links to.
        "pypi": (("pypi.org", _TLS), ("files.pythonhosted.org", _TLS)),
        # npm (and pnpm, yarn 2+): tarballs are served from the registry host itself.
        "npm": (("registry.npmjs.org", _TLS),),
        # apt in Debian images: deb.debian.org serves the archive and, since bookworm,
        # /debian-security too; security.debian.org is what bullseye and older use.
        "debian": (("deb.debian.org", _HTTP_AND_TLS), ("security.debian.org", _HTTP_AND_TLS)),
        # apt in Ubuntu images: amd64 (archive, security) and other architectures (ports).
        "ubuntu": (
            ("archive.ubuntu.com", _HTTP_AND_TLS),
            ("security.ubuntu.com", _HTTP_AND_TLS),
            ("ports.ubuntu.com", _HTTP_AND_TLS),
        ),
        # git over HTTPS, the REST API, source archives, raw files and release downloads.
        "github": (
            ("github.com", _TLS),
            ("api.github.com", _TLS),
            ("codeload.github.com", _TLS),
            ("raw.githubusercontent.com", _TLS),
            ("objects.githubusercontent.com", _TLS),
            ("release-assets.githubusercontent.com", _TLS),
        ),
        # Any public host on the web ports: names only, never an IP literal, and every
        # resolved address must be public (private, loopback, link-local and metadata
        # addresses stay refused; port 25 is refused whatever the rules say).
        "internet": (("*", _HTTP_AND_TLS),),
    }
)

#: What ``sandgate serve --allow-package-registries`` adds for every sandbox.
PACKAGE_REGISTRIES: Final = ("pypi", "npm", "debian")


def preset_of(host: str, port: int) -> str | None:
    """The preset (other than ``internet``) that would let ``host:port`` through, if any;
    ``host`` is canonical. Used to tell a refused client what to write."""
    for name, entries in PRESETS.items():
        if name != "internet" and any(h == host and port in p for h, p in entries):
            return name
    return None
