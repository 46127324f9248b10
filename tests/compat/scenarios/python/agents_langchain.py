"""langchain-e2b: a LangChain Deep Agent whose tools run in an E2B sandbox.

Arguments: the scripted model server's OpenAI base URL, the model name scripted there, and a
file path to read back directly with the E2B SDK at the end.

``create_deep_agent(model=ChatOpenAI(<scripted server>), backend=langchain_e2b.E2BSandbox(...))``
gives the agent deepagents' tools (``execute``, ``write_file``, ``edit_file``, ``read_file``,
...), each running through langchain-e2b in the sandbox. The scripted model decides which
tools to call; the result lists every tool message the agent produced (name, status, content),
the final answer, and the file as the E2B SDK reads it afterwards.
"""

from __future__ import annotations

from typing import Any

from _common import run

PACKAGES = ("langchain-e2b", "deepagents", "langchain-openai", "langchain-core")


def scenario(args: list[str]) -> dict[str, Any]:
    import e2b
    from deepagents import create_deep_agent
    from langchain_e2b import E2BSandbox
    from langchain_openai import ChatOpenAI

    model_url, model_name, read_back = args
    sandbox = e2b.Sandbox.create(timeout=300)
    result: dict[str, Any] = {"sandbox_id": sandbox.sandbox_id}
    try:
        agent = create_deep_agent(
            model=ChatOpenAI(
                model=model_name, base_url=model_url, api_key="scripted", max_retries=0
            ),
            backend=E2BSandbox(sandbox=sandbox),
        )
        state = agent.invoke(
            {"messages": [{"role": "user", "content": "Write, edit and read the note."}]}
        )
        messages = state["messages"]
        result["tools"] = [
            {"name": m.name, "status": m.status, "content": m.content}
            for m in messages
            if m.type == "tool"
        ]
        result["final"] = messages[-1].content
        result["read_back"] = sandbox.files.read(read_back)
    finally:
        sandbox.kill()
    return result


if __name__ == "__main__":
    run(scenario, PACKAGES)
