"""OpenAI Agents SDK: its E2B sandbox session, driven directly and by a scripted model.

Arguments: the scripted model server's OpenAI base URL and the model name scripted there.

1. ``E2BSandboxClient.create`` + ``session.start()``: the SDK creates its workspace root
   (``/workspace``, the manifest default) and installs its runtime helper scripts under
   ``/tmp/openai-agents/bin``, then runs them for every path check.
2. ``session.exec`` a shell command in the workspace.
3. ``session.write`` / ``session.read`` a file, then edit it with the SDK's own editor
   (``WorkspaceEditor.apply_patch``, a V4A diff: what the ``apply_patch`` tool runs) and read
   it back; ``ls`` the directory.
4. A ``SandboxAgent`` run on the same live session: the scripted model calls the SDK's
   ``exec_command`` tool (Chat Completions), the SDK runs it in the sandbox, sends the output
   back to the model and returns the model's final text.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from _common import run

PACKAGES = ("openai-agents", "openai")
NOTE = Path("notes/hello.txt")
ORIGINAL = "line one\nline two\n"
PATCH = "@@\n line one\n-line two\n+line 2, edited by apply_patch\n"


async def _scenario(model_url: str, model_name: str) -> dict[str, Any]:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
    from agents.extensions.sandbox.e2b import (
        E2BSandboxClient,
        E2BSandboxClientOptions,
        E2BSandboxType,
    )
    from agents.run_config import SandboxRunConfig
    from agents.sandbox import SandboxAgent
    from agents.sandbox.apply_patch import WorkspaceEditor
    from agents.sandbox.capabilities import Shell
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = E2BSandboxClient()
    session = await client.create(
        options=E2BSandboxClientOptions(sandbox_type=E2BSandboxType.E2B, timeout=300)
    )
    result: dict[str, Any] = {"sandbox_id": session.state.sandbox_id}
    try:
        await session.start()
        result["root"] = session.state.manifest.root

        executed = await session.exec("echo hello $((6 * 7)) && pwd")
        result["exec"] = {
            "exit_code": executed.exit_code,
            "stdout": executed.stdout.decode(),
            "stderr": executed.stderr.decode(),
        }

        await session.write(NOTE, io.BytesIO(ORIGINAL.encode()))
        result["read"] = (await session.read(NOTE)).read().decode()
        await WorkspaceEditor(session).apply_patch(
            {"type": "update_file", "path": str(NOTE), "diff": PATCH}
        )
        result["edited"] = (await session.read(NOTE)).read().decode()
        result["ls"] = sorted(Path(entry.path).name for entry in await session.ls("notes"))
        on_disk = await session.exec(f"cat /workspace/{NOTE}")
        result["on_disk"] = on_disk.stdout.decode()

        model = OpenAIChatCompletionsModel(
            model=model_name,
            openai_client=AsyncOpenAI(base_url=model_url, api_key="scripted", max_retries=0),
        )
        agent: Agent[Any] = SandboxAgent(
            name="sandgate-compat",
            instructions="Use the shell to answer.",
            model=model,
            capabilities=[Shell()],
        )
        answer = await Runner.run(
            agent,
            "What does the note say?",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
            max_turns=4,
        )
        result["final_output"] = answer.final_output
    finally:
        await session.shutdown()
    return result


def scenario(args: list[str]) -> dict[str, Any]:
    model_url, model_name = args
    return asyncio.run(_scenario(model_url, model_name))


if __name__ == "__main__":
    run(scenario, PACKAGES)
