"""A team volume end to end: the volume file API, a sandbox that mounts it, refusal to delete
it while mounted, reading back what the sandbox wrote, and destroy.

Argument: the volume's name."""

from __future__ import annotations

from typing import Any

from _common import attempt, run
from e2b import Sandbox, Volume


def _entry(entry: Any) -> dict[str, Any]:
    return {
        "name": entry.name,
        "type": str(getattr(entry.type, "value", entry.type)),
        "path": entry.path,
        "size": entry.size,
        "mode": entry.mode,
        "uid": entry.uid,
        "gid": entry.gid,
    }


def scenario(args: list[str]) -> dict[str, Any]:
    (name,) = args
    out: dict[str, Any] = {}
    volume = Volume.create(name)
    out["created"] = {"name": volume.name, "has_token": bool(volume.token)}
    out["write"] = _entry(volume.write_file("/docs/hello.txt", "hello", force=True))
    out["write_no_parent"] = attempt(lambda: volume.write_file("/missing/x.txt", "x"))
    out["make_dir"] = _entry(volume.make_dir("/docs/sub"))
    out["list"] = sorted(e.name for e in volume.list("/docs"))
    out["stat"] = _entry(volume.get_info("/docs/hello.txt"))
    out["exists"] = [volume.exists("/docs/hello.txt"), volume.exists("/nope")]
    out["chmod"] = _entry(volume.update_metadata("/docs/hello.txt", mode=0o640))
    out["read"] = volume.read_file("/docs/hello.txt")
    out["read_missing"] = attempt(lambda: volume.read_file("/nope"))
    sandbox = Sandbox.create("base", volume_mounts={"/mnt/vol": volume})
    try:
        inside = sandbox.commands.run(
            "cat /mnt/vol/docs/hello.txt && echo && echo inside > /mnt/vol/from-sandbox.txt "
            "&& stat -c '%U %a' /mnt/vol/from-sandbox.txt"
        )
        out["inside"] = inside.stdout
        out["info_mounts"] = [dict(m) for m in sandbox.get_info().volume_mounts or []]
        out["destroy_mounted"] = attempt(lambda: Volume.destroy(volume.volume_id))
    finally:
        attempt(sandbox.kill)
    out["read_back"] = volume.read_file("/from-sandbox.txt")
    out["listed"] = name in [v.name for v in Volume.list()]
    out["info_by_id"] = Volume.get_info(volume.volume_id).name
    out["connect"] = Volume.connect(volume.volume_id).read_file("/docs/hello.txt")
    volume.remove("/docs")
    out["removed"] = volume.exists("/docs")
    out["destroyed"] = Volume.destroy(volume.volume_id)
    out["destroyed_again"] = Volume.destroy(volume.volume_id)
    out["info_after"] = attempt(lambda: Volume.get_info(volume.volume_id))
    return out


if __name__ == "__main__":
    run(scenario)
