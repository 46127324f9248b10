"""A cancel is never lost: not when it lands in the loop turn the awaited work finishes in
(``asyncio.wait_for`` on Python 3.11 returns the result then), not while a task stops a
helper task (``suppress(CancelledError)`` around the await swallows the caller's cancel).

The agent runner's /cancel relied on the first: a run cancelled as its model's answer arrived
went on to run the code the model wrote (tests/integration/channels/test_telegram.py saw a
cancelled run keep working for minutes).
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sandgate._tasks import cancel_and_wait, wait_quietly
from sandgate.agents.loop import Turn
from sandgate.agents.providers import ModelReply, ModelRequest
from sandgate.agents.steps import ModelStep

SRC = Path(__file__).resolve().parents[2] / "src" / "sandgate"


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class _HeldRouter:
    """A model router whose answer arrives when the test says."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def complete(self, *_: Any) -> Any:
        return await self.answer


def test_a_cancel_that_lands_as_the_model_answers_ends_the_turn() -> None:
    async def main() -> None:
        router = _HeldRouter()
        turn = Turn(
            agent=cast(Any, SimpleNamespace(models=[])),
            system="",
            messages=[],
            router=cast(Any, router),
            code=cast(Any, None),
            gateway=cast(Any, None),
            sandbox=cast(Any, None),
            emit=lambda *_: None,
            checks=[],
            progress=cast(Any, SimpleNamespace(remaining_s=lambda: 60.0)),
        )
        request = ModelRequest(model="", system="", messages=(), max_tokens=1)
        task = asyncio.create_task(turn._complete(ModelStep(number=1), request))
        await _settle()  # the call is in flight
        # The answer and the cancel in the same loop turn, the answer first.
        router.answer.set_result(("choice", ModelReply("late", 1, 1, "m")))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_cancel_and_wait_absorbs_the_tasks_end_but_not_a_cancel_of_the_caller() -> None:
    async def main() -> None:
        stopping = asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.sleep(60)
            finally:
                stopping.set()
                await asyncio.sleep(60)  # slow to stop: the caller is cancelled meanwhile

        async def failing() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                raise ValueError("went wrong on the way out") from None

        helper = asyncio.create_task(failing())
        await _settle()
        await cancel_and_wait(helper)  # ValueError absorbed by default
        assert helper.done()
        helper = asyncio.create_task(failing())
        await _settle()
        with pytest.raises(ValueError, match="on the way out"):
            await cancel_and_wait(helper, absorb=())

        slow = asyncio.create_task(stubborn())
        await _settle()
        stopper = asyncio.create_task(cancel_and_wait(slow))
        await stopping.wait()
        stopper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopper  # the caller's cancel is not mistaken for the helper's
        slow.cancel()
        await asyncio.wait([slow])

    asyncio.run(main())


def test_wait_quietly_waits_without_cancelling_and_passes_a_cancel_of_the_caller() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def work() -> str:
            await release.wait()
            raise RuntimeError("the task's own failure")

        task = asyncio.create_task(work())
        waiter = asyncio.create_task(wait_quietly(task))
        await _settle()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not task.done()  # the caller's cancel did not reach the task
        release.set()
        await wait_quietly(task)  # its failure is not the waiter's
        assert isinstance(task.exception(), RuntimeError)

    asyncio.run(main())


def _asyncio_attribute(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == "asyncio"
    )


def _server_modules() -> list[tuple[str, ast.AST]]:
    """The modules that run on asyncio (the guest's, but for its client, run on its own
    loop, with its own ``wait_for``)."""
    modules = []
    for path in sorted(SRC.rglob("*.py")):
        name = str(path.relative_to(SRC))
        if name.startswith("guest/") and name != "guest/client.py":
            continue
        modules.append((name, ast.parse(path.read_text(), name)))
    return modules


def test_no_module_of_the_server_uses_asyncio_wait_for() -> None:
    """``asyncio.timeout`` instead."""
    offenders = [
        f"{name}:{node.lineno}"
        for name, tree in _server_modules()
        for node in ast.walk(tree)
        if _asyncio_attribute(node, "wait_for")
    ]
    assert offenders == [], offenders


def test_no_module_of_the_server_suppresses_cancelled_error() -> None:
    """``cancel_and_wait``/``wait_quietly`` instead; a process's own top level may end on
    the cancel its SIGTERM handler sends."""
    top_level = {"interpreter/server.py"}
    offenders = [
        f"{name}:{node.lineno}"
        for name, tree in _server_modules()
        if name not in top_level
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "suppress"
        and any(_asyncio_attribute(arg, "CancelledError") for arg in node.args)
    ]
    assert offenders == [], offenders
