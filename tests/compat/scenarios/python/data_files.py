"""Files on the data plane (issue 3): read/write in every form, write_files, parents, overwrite,
list with depth, exists, get_info, make_dir, rename, remove, watch_dir, gzip both ways,
per-file metadata, and signed URLs used without SDK credentials (plain httpx)."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import httpx
from _common import attempt, describe_error, iso, run
from _data import outcome, poll
from e2b import Sandbox

ROOT = "/home/user/dp"
BINARY = bytes(range(256)) * 16
#: Large enough to be sent in several chunks both ways.
STREAM_BYTES = hashlib.sha256(b"seed").digest() * (3 * 1024 * 1024 // 32)
#: (file, event) pairs the recursive watch must report, relative to the watched directory.
WANTED_EVENTS = {
    ("sub/new.txt", "create"),
    ("sub/new.txt", "write"),
    ("sub/new.txt", "chmod"),
    ("sub/new.txt", "rename"),
    ("sub/moved.txt", "create"),
    ("sub/moved.txt", "remove"),
}


def info(entry: Any) -> dict[str, Any]:
    return {
        "name": entry.name,
        "type": str(getattr(entry.type, "value", entry.type)),
        "path": entry.path,
        "size": entry.size,
        "mode": entry.mode,
        "permissions": entry.permissions,
        "owner": entry.owner,
        "group": entry.group,
        "modified_time": iso(entry.modified_time),
        "symlink_target": entry.symlink_target,
        "metadata": dict(entry.metadata or {}) if hasattr(entry, "metadata") else None,
    }


def write_info(entry: Any) -> dict[str, Any]:
    return {
        "name": entry.name,
        "path": entry.path,
        "type": str(getattr(entry.type, "value", entry.type)),
        "metadata": dict(getattr(entry, "metadata", None) or {}),
    }


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create("base")
    files = sbx.files
    try:
        # --- write and read in every form
        out["write_text"] = write_info(files.write(f"{ROOT}/a.txt", "héllo\n"))
        out["read_text"] = files.read(f"{ROOT}/a.txt")
        out["read_bytes_of_text"] = files.read(f"{ROOT}/a.txt", format="bytes").hex()
        files.write(f"{ROOT}/bin.dat", BINARY)
        out["binary_roundtrip"] = bytes(files.read(f"{ROOT}/bin.dat", format="bytes")) == BINARY
        files.write(f"{ROOT}/stream.dat", io.BytesIO(STREAM_BYTES))
        with files.read(f"{ROOT}/stream.dat", format="stream") as reader:
            chunks = list(reader)
        out["stream_chunks"] = len(chunks)
        out["stream_roundtrip"] = b"".join(chunks) == STREAM_BYTES
        out["write_files"] = [
            write_info(w)
            for w in files.write_files(
                [
                    {"path": f"{ROOT}/many/one.txt", "data": "1"},
                    {"path": f"{ROOT}/many/two.bin", "data": b"\x00\x02"},
                    {"path": f"{ROOT}/many/deep/three.txt", "data": "3"},
                ]
            )
        ]
        out["write_files_read"] = [
            files.read(f"{ROOT}/many/one.txt"),
            bytes(files.read(f"{ROOT}/many/two.bin", format="bytes")).hex(),
            files.read(f"{ROOT}/many/deep/three.txt"),
        ]
        out["parents"] = write_info(files.write(f"{ROOT}/p/q/r/s.txt", "deep"))
        out["parents_read"] = files.read(f"{ROOT}/p/q/r/s.txt")
        files.write(f"{ROOT}/a.txt", "second")
        out["overwrite_read"] = files.read(f"{ROOT}/a.txt")
        out["read_missing"] = attempt(lambda: files.read(f"{ROOT}/missing.txt"))
        out["read_dir"] = attempt(lambda: files.read(ROOT))

        # --- list with depth: exact lexical pre-order, root excluded
        for path in ("tree/a/b/c.txt", "tree/a/x.txt", "tree/z.txt"):
            files.write(f"{ROOT}/{path}", path)
        out["list"] = {
            str(depth): [e.path for e in files.list(f"{ROOT}/tree", depth=depth)]
            for depth in (1, 2, 3)
        }
        out["list_missing"] = attempt(lambda: files.list(f"{ROOT}/nope"))

        # --- exists, get_info (file, directory, symlink)
        out["exists"] = [files.exists(f"{ROOT}/a.txt"), files.exists(f"{ROOT}/missing.txt")]
        sbx.commands.run(
            f"chmod 640 {ROOT}/a.txt && touch -d '2001-02-03 04:05:06 UTC' {ROOT}/a.txt"
            f" && ln -s {ROOT}/a.txt {ROOT}/link && ln -s {ROOT}/tree {ROOT}/dirlink"
        )
        out["info_file"] = info(files.get_info(f"{ROOT}/a.txt"))
        out["info_dir"] = info(files.get_info(f"{ROOT}/tree"))
        out["info_link"] = info(files.get_info(f"{ROOT}/link"))
        out["info_dirlink"] = info(files.get_info(f"{ROOT}/dirlink"))
        out["info_root_file"] = info(files.get_info("/etc/hostname"))
        out["info_missing"] = attempt(lambda: files.get_info(f"{ROOT}/missing.txt"))

        # --- make_dir, rename, remove
        out["make_dir"] = [
            files.make_dir(f"{ROOT}/made/x/y"),
            files.make_dir(f"{ROOT}/made/x/y"),
            files.make_dir(f"{ROOT}/made"),
        ]
        files.write(f"{ROOT}/ren-src.txt", "moving")
        out["rename"] = info(files.rename(f"{ROOT}/ren-src.txt", f"{ROOT}/ren/dst.txt"))
        out["rename_after"] = [
            files.exists(f"{ROOT}/ren-src.txt"),
            files.read(f"{ROOT}/ren/dst.txt"),
        ]
        out["rename_missing"] = attempt(lambda: files.rename(f"{ROOT}/nope", f"{ROOT}/nope2"))
        files.remove(f"{ROOT}/tree")
        files.remove(f"{ROOT}/a.txt")
        out["remove_after"] = [files.exists(f"{ROOT}/tree"), files.exists(f"{ROOT}/a.txt")]
        out["remove_missing"] = attempt(lambda: files.remove(f"{ROOT}/never-existed"))

        # --- watch_dir (recursive): create, write, chmod, rename, remove in a subdirectory
        files.make_dir(f"{ROOT}/watched/sub")
        watcher = files.watch_dir(f"{ROOT}/watched", recursive=True)
        seen: list[list[str]] = []

        def collect() -> bool:
            for event in watcher.get_new_events():
                seen.append([event.name, str(getattr(event.type, "value", event.type))])
            return {(n, t.lower()) for n, t in seen} >= WANTED_EVENTS

        files.write(f"{ROOT}/watched/sub/new.txt", "v1")
        sbx.commands.run(f"echo more >> {ROOT}/watched/sub/new.txt")
        sbx.commands.run(f"chmod 600 {ROOT}/watched/sub/new.txt")
        files.rename(f"{ROOT}/watched/sub/new.txt", f"{ROOT}/watched/sub/moved.txt")
        files.remove(f"{ROOT}/watched/sub/moved.txt")
        out["watch_complete"] = bool(poll(collect, 10))
        out["watch_events"] = seen
        watcher.stop()
        out["watch_missing"] = attempt(lambda: files.watch_dir(f"{ROOT}/no-such-dir"))

        # --- gzip both ways
        gz_data = b"gzip me " * 10_000
        out["gzip_write"] = outcome(
            lambda: write_info(files.write(f"{ROOT}/gz.bin", gz_data, gzip=True))
        )
        out["gzip_read"] = outcome(
            lambda: bytes(files.read(f"{ROOT}/gz.bin", format="bytes", gzip=True)) == gz_data
        )

        # --- per-file metadata (keys lowercased; each upload replaces the set)
        out["metadata_write"] = outcome(
            lambda: write_info(
                files.write(f"{ROOT}/meta.txt", "m", metadata={"Owner-Team": "blue", "x": "1"})
            )
        )
        out["metadata_info"] = info(files.get_info(f"{ROOT}/meta.txt"))["metadata"]
        files.write(f"{ROOT}/meta.txt", "m2")
        out["metadata_replaced"] = info(files.get_info(f"{ROOT}/meta.txt"))["metadata"]

        # --- signed URLs used with no SDK credentials at all
        upload_url = sbx.upload_url(f"{ROOT}/signed.txt")
        download_url = sbx.download_url(f"{ROOT}/signed.txt")
        with httpx.Client(timeout=30) as plain:
            up = plain.post(upload_url, files={"file": ("signed.txt", b"via signed url")})
            out["signed_upload"] = {"status": up.status_code, "body": up.text}
            down = plain.get(download_url)
            out["signed_download"] = {"status": down.status_code, "body": down.text}
            tampered = download_url.replace("signed.txt", "other.txt", 1)
            bad = plain.get(tampered)
            out["signed_tampered"] = {"status": bad.status_code, "body": bad.text}
            expiring = sbx.download_url(f"{ROOT}/signed.txt", use_signature_expiration=1)
            first = plain.get(expiring)
            out["expiring_first"] = first.status_code
            expired = poll(lambda: (r := plain.get(expiring)).status_code == 401 and r, 10)
            out["expired"] = (
                {"status": expired.status_code, "body": expired.json()} if expired else None
            )
    except Exception as exc:
        out["scenario_error"] = describe_error(exc)
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
