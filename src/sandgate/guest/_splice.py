"""Copying bytes both ways between two stream pairs until either side is done."""

from __future__ import annotations

import asyncio

__all__ = ["splice"]

_CHUNK = 64 * 1024


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    while data := await src.read(_CHUNK):
        dst.write(data)
        await dst.drain()
    if dst.can_write_eof():
        dst.write_eof()


async def splice(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    pumps = [
        asyncio.ensure_future(_pump(a_reader, b_writer)),
        asyncio.ensure_future(_pump(b_reader, a_writer)),
    ]
    try:
        pending = set(pumps)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(task.exception() is not None for task in done):
                break
    finally:
        for task in pumps:
            task.cancel()
        for writer in (a_writer, b_writer):
            writer.transport.abort()
