"""e2b-haystack: a Haystack ``Agent`` whose tools (``E2BToolset``) run in an E2B sandbox.

Arguments: the scripted model server's OpenAI base URL, the model name scripted there, and a
file path to read back at the end through the toolset's own ``read_file`` tool object.

The agent's chat generator is Haystack's ``OpenAIChatGenerator`` pointed at the scripted
server; the scripted model calls ``run_bash_command``, ``write_file``, ``list_directory`` and
``read_file``, and Haystack's tool invoker runs each through e2b-haystack in one shared sandbox.
The result lists every tool result the agent saw (tool name, error flag, text), the final
answer, and a direct ``ReadFileTool.invoke`` round trip after the run.
"""

from __future__ import annotations

import os
from typing import Any

from _common import run

PACKAGES = ("e2b-haystack", "haystack-ai")


def scenario(args: list[str]) -> dict[str, Any]:
    # Haystack reports usage to a remote service unless told not to; no network here.
    os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.utils import Secret
    from haystack_integrations.tools.e2b import E2BToolset

    model_url, model_name, read_back = args
    toolset = E2BToolset(timeout=300)
    agent = Agent(
        chat_generator=OpenAIChatGenerator(
            api_key=Secret.from_token("scripted"),
            model=model_name,
            api_base_url=model_url,
            max_retries=0,
        ),
        tools=toolset,
    )
    result: dict[str, Any] = {}
    try:
        agent.warm_up()
        result["sandbox_id"] = toolset.sandbox._sandbox.sandbox_id
        reply = agent.run(messages=[ChatMessage.from_user("Write and read the note.")])
        result["tools"] = [
            {"name": r.origin.tool_name, "error": r.error, "result": r.result}
            for message in reply["messages"]
            for r in message.tool_call_results
        ]
        result["final"] = reply["messages"][-1].text
        read_tool = next(tool for tool in toolset if tool.name == "read_file")
        result["read_back"] = read_tool.invoke(path=read_back)
    finally:
        toolset.close()
    return result


if __name__ == "__main__":
    run(scenario, PACKAGES)
