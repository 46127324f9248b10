"""Data-plane details E2B's own clients rely on (issue 18), each as E2B's envd behaves: a signed
upload URL takes a multipart form whose ``file`` part is a plain field (no filename); files
under ``/proc`` and ``/sys`` read through the files API exactly as ``cat`` reads them as the
same user inside the sandbox; a write through the files API gives envd's watch events, counted
on the polling watcher (sync SDK) and on the stream (async SDK); a command whose sandbox is
killed ends with the SDK's "sandbox was killed" error."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from _common import attempt, describe_error, run
from _data import Waiter
from e2b import AsyncSandbox, Sandbox

ROOT = "/home/user/details"
#: Files the kernel generates, read both ways (``/sys/class/net/lo`` is absent where the
#: runtime mounts no sysfs: then both ways must say so).
KERNEL_FILES = (
    "/proc/sys/kernel/random/boot_id",
    "/proc/sys/kernel/hostname",
    "/proc/self/uid_map",
    "/sys/class/net/lo/mtu",
)
STREAM_WAIT_S = 20


def _kind(event: Any) -> str:
    return str(getattr(event.type, "value", event.type)).lower()


def _events(found: list[Any]) -> list[list[str]]:
    return [[event.name, _kind(event)] for event in found]


def _read_both_ways(sbx: Sandbox, path: str) -> dict[str, Any]:
    shown = sbx.commands.run(f"cat {path} 2>/dev/null || echo MISSING", user="user")
    read = attempt(lambda: sbx.files.read(path, user="user"))
    return {"cat": shown.stdout, "read": read}


async def _streamed(sandbox_id: str) -> dict[str, Any]:
    """Events of the async SDK's watch (a WatchDir stream) for a new file, the same file
    overwritten, then a sentinel whose write marks that everything before it has arrived."""
    sbx = await AsyncSandbox.connect(sandbox_id)
    seen: list[list[str]] = []
    done = asyncio.Event()

    def on_event(event: Any) -> None:
        seen.append([event.name, _kind(event)])
        if event.name == "sentinel.txt" and _kind(event) == "write":
            done.set()

    await sbx.files.make_dir(f"{ROOT}/streamed")
    handle = await sbx.files.watch_dir(f"{ROOT}/streamed", on_event=on_event)
    await sbx.files.write(f"{ROOT}/streamed/a.txt", "first")
    await sbx.files.write(f"{ROOT}/streamed/a.txt", "second")
    await sbx.files.write(f"{ROOT}/streamed/sentinel.txt", "end")
    try:
        await asyncio.wait_for(done.wait(), STREAM_WAIT_S)
        complete = True
    except TimeoutError:
        complete = False
    await handle.stop()
    return {"complete": complete, "events": seen}


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create("base")
    files = sbx.files
    try:
        # --- a signed upload URL and a form whose 'file' part is a plain field
        files.make_dir(ROOT)
        with httpx.Client(timeout=30) as plain:
            up = plain.post(
                sbx.upload_url(f"{ROOT}/plain.txt"), files={"file": (None, b"a plain field")}
            )
            out["plain_field"] = {"status": up.status_code, "body": up.text}
            out["plain_field_read"] = attempt(lambda: files.read(f"{ROOT}/plain.txt"))

        # --- files the kernel generates, as the sandbox's user sees them
        out["kernel_files"] = {path: _read_both_ways(sbx, path) for path in KERNEL_FILES}
        out["id"] = sbx.commands.run("id -u").stdout.strip()
        out["status"] = attempt(lambda: files.read("/proc/self/status", user="user"))
        out["pagemap"] = attempt(lambda: files.read("/proc/self/pagemap", user="root"))
        out["mem"] = attempt(lambda: files.read("/proc/self/mem", user="root"))
        sbx.commands.run(f"mkfifo {ROOT}/fifo")
        out["fifo"] = attempt(lambda: files.read(f"{ROOT}/fifo"))

        # --- a write's watch events, counted as the sync SDK's tests count them
        files.make_dir(f"{ROOT}/polled/sub")
        handle = files.watch_dir(f"{ROOT}/polled")
        files.write(f"{ROOT}/polled/new.txt", "first")
        out["polled_new"] = _events(handle.get_new_events())
        files.write(f"{ROOT}/polled/new.txt", "second")
        out["polled_overwrite"] = _events(handle.get_new_events())
        files.write(f"{ROOT}/polled/empty.txt", "")
        out["polled_empty"] = _events(handle.get_new_events())
        files.write(f"{ROOT}/polled/meta.txt", "m", metadata={"k": "v"})
        out["polled_metadata"] = _events(handle.get_new_events())
        handle.stop()
        recursive = files.watch_dir(f"{ROOT}/polled", recursive=True)
        files.write(f"{ROOT}/polled/sub/nested.txt", "nested")
        out["polled_recursive"] = _events(recursive.get_new_events())
        recursive.stop()
        out["streamed"] = asyncio.run(_streamed(sbx.sandbox_id))

        # --- the sandbox is killed while a command runs
        running = sbx.commands.run("sleep 120", background=True, timeout=0)
        waiter = Waiter(running)
        out["killed"] = sbx.kill()
        out["killed_wait"] = waiter.join(60)
    except Exception as exc:
        out["scenario_error"] = describe_error(exc)
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
