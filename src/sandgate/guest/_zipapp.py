"""Builds ``guest.pyz``, the daemon as one file the runtimes bind into each sandbox.

The archive holds a stub ``sandgate/__init__.py`` (so nothing from the gateway's package is
dragged in), every module of ``sandgate/guest`` but the two only the gateway runs (``client``,
its side of the protocol, and this builder), the stdlib-only ``sandgate/strictjson.py`` (the
protocol's JSON decoder) and a ``__main__.py`` that starts the daemon. One archive serves
every sandbox: the runtimes bind it read-only into each (``SandboxSpec.guest``).
Entries are sorted and dated 1980-01-01, so the same sources give the same bytes.

Each module also ships as unchecked-hash bytecode for the gateway's Python version: a sandbox
with the same Python starts the guest without compiling it (tens of milliseconds on a small
VM); any other Python finds the magic number wrong and compiles the sources as usual.

Compiling and compressing every module costs a noticeable part of a gateway's start (about a
third of a second of CPU on a small VM), paid again by each CLI command that builds the
sandbox service. The archive's comment is a digest of what went into it (the sources, this
builder's own source among them, and the bytecode's magic number): an archive on disk whose
comment matches is not rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import marshal
import os
import tempfile
import zipfile
from pathlib import Path

__all__ = ["build_zipapp"]

_EPOCH = (1980, 1, 1, 0, 0, 0)
_MAIN = b"from sandgate.guest.daemon import main\n\nmain()\n"
_PACKAGE_INIT = b'"""Sandgate guest bundle (generated)."""\n'
#: Replaces ``sandgate/guest/__init__.py`` in the archive: the real one imports this builder
#: (``zipfile``, ``tempfile``, ``importlib.util``, ...), start-up time the daemon never uses.
_GUEST_INIT = b'"""The Sandgate guest daemon (generated; see ``daemon``)."""\n'
#: Modules of ``sandgate/guest`` the daemon never imports: left out of the archive.
_GATEWAY_ONLY = frozenset({"client.py", "_zipapp.py"})


def _bytecode(name: str, source: bytes) -> bytes:
    code = compile(source, name, "exec", dont_inherit=True, optimize=0)
    source_hash = importlib.util.source_hash(source)
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + source_hash
    return header + marshal.dumps(code)


def _sources() -> list[tuple[str, bytes]]:
    guest_dir = Path(__file__).resolve().parent
    sources = [
        ("__main__.py", _MAIN),
        ("sandgate/__init__.py", _PACKAGE_INIT),
        ("sandgate/strictjson.py", (guest_dir.parent / "strictjson.py").read_bytes()),
    ]
    for path in sorted(guest_dir.rglob("*.py")):
        if "__pycache__" in path.parts or path.relative_to(guest_dir).as_posix() in _GATEWAY_ONLY:
            continue
        name = "sandgate/guest/" + path.relative_to(guest_dir).as_posix()
        source = _GUEST_INIT if name == "sandgate/guest/__init__.py" else path.read_bytes()
        sources.append((name, source))
    return sources


def _digest(sources: list[tuple[str, bytes]]) -> bytes:
    """What the archive is made of (its comment): sources and the bytecode's magic number."""
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for name, source in sources:
        digest.update(f"{name}\0{len(source)}\0".encode())
        digest.update(source)
    return b"sandgate-guest " + digest.hexdigest().encode()


def _archive(sources: list[tuple[str, bytes]]) -> bytes:
    members = []
    for name, source in sources:
        members.append((name, source))
        if name != "__main__.py":  # run from the archive's top: never imported
            members.append((name + "c", _bytecode(name, source)))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            # Bytecode is what every sandbox's start reads: stored, it is not inflated there
            # (~2 ms of each start here); sources, read only for tracebacks, stay deflated.
            stored = name.endswith(".pyc")
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            archive.writestr(info, data, compresslevel=None if stored else 9)
        archive.comment = _digest(sources)
    return buffer.getvalue()


def _comment(path: Path) -> bytes | None:
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.comment
    except (OSError, zipfile.BadZipFile):
        return None


def build_zipapp(dest: Path) -> Path:
    """Writes the guest zipapp to ``dest`` unless it already holds an archive of exactly
    these sources (its comment says which).

    Returns ``dest``. The write is atomic (temp file + rename), so a sandbox starting at the
    same moment never sees a partial archive.
    """
    dest = Path(dest)
    sources = _sources()
    if _comment(dest) == _digest(sources):
        return dest
    content = _archive(sources)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.chmod(temp, 0o644)
        os.replace(temp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return dest
