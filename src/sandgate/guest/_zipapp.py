"""Builds ``guest.pyz``, the daemon as one file the gateway copies into each sandbox.

The archive holds a stub ``sandgate/__init__.py`` (so nothing from the gateway's package is
dragged in), every module of ``sandgate/guest``, the stdlib-only ``sandgate/strictjson.py``
(the protocol's JSON decoder) and a ``__main__.py`` that starts the daemon.
Entries are sorted and dated 1980-01-01, so the same sources give the same bytes.

Each module also ships as unchecked-hash bytecode for the gateway's Python version: a sandbox
with the same Python starts the guest without compiling it (tens of milliseconds on a small
VM); any other Python finds the magic number wrong and compiles the sources as usual.
"""

from __future__ import annotations

import contextlib
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


def _bytecode(name: str, source: bytes) -> bytes:
    code = compile(source, name, "exec", dont_inherit=True, optimize=0)
    source_hash = importlib.util.source_hash(source)
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + source_hash
    return header + marshal.dumps(code)


def _members() -> list[tuple[str, bytes]]:
    guest_dir = Path(__file__).resolve().parent
    sources = [
        ("sandgate/__init__.py", _PACKAGE_INIT),
        ("sandgate/strictjson.py", (guest_dir.parent / "strictjson.py").read_bytes()),
    ]
    for path in sorted(guest_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = "sandgate/guest/" + path.relative_to(guest_dir).as_posix()
        source = _GUEST_INIT if name == "sandgate/guest/__init__.py" else path.read_bytes()
        sources.append((name, source))
    members = [("__main__.py", _MAIN)]
    for name, source in sources:
        members.append((name, source))
        members.append((name + "c", _bytecode(name, source)))
    return sorted(members)


def _archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in _members():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            archive.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


def build_zipapp(dest: Path) -> Path:
    """Writes the guest zipapp to ``dest`` unless it already holds exactly these bytes.

    Returns ``dest``. The write is atomic (temp file + rename), so a sandbox starting at the
    same moment never sees a partial archive.
    """
    dest = Path(dest)
    content = _archive()
    try:
        if dest.read_bytes() == content:
            return dest
    except FileNotFoundError:
        pass
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
