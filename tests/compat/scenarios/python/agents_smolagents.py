"""smolagents: ``CodeAgent(executor_type="e2b")`` installs a package and imports it.

Arguments: the scripted model server's OpenAI base URL, the model name scripted there, the
package to authorise (not in the template; smolagents runs ``!pip install <package>`` in the
sandbox's Jupyter kernel before the first step), and a JSON object of environment variables
for the sandbox (``executor_kwargs={"envs": ...}`` → ``Sandbox.create(envs=...)``: how the
test points pip at its own index).

The scripted model answers with code that imports the package and calls ``final_answer``;
smolagents runs it in the same kernel that ran ``pip install``, so the run only succeeds when
the install is visible to the running kernel. The result holds the final answer, every step's
observations and error, and the executor's log (pip's output included).
"""

from __future__ import annotations

import io
import json
from typing import Any

from _common import describe_error, run

PACKAGES = ("smolagents", "openai")


def scenario(args: list[str]) -> dict[str, Any]:
    from rich.console import Console
    from smolagents import CodeAgent, OpenAIServerModel
    from smolagents.monitoring import AgentLogger, LogLevel

    model_url, model_id, package, envs = args
    log = io.StringIO()
    logger = AgentLogger(LogLevel.INFO, console=Console(file=log, width=200, color_system=None))
    agent = CodeAgent(
        tools=[],
        model=OpenAIServerModel(model_id=model_id, api_base=model_url, api_key="scripted"),
        executor_type="e2b",
        executor_kwargs={"envs": json.loads(envs), "timeout": 300},
        additional_authorized_imports=[package],
        max_steps=1,
        logger=logger,
    )
    result: dict[str, Any] = {"sandbox_id": agent.python_executor.sandbox.sandbox_id}
    try:
        result["answer"] = agent.run(f"Which version of {package} is installed?")
        result["error"] = None
    except Exception as exc:
        result["answer"] = None
        result["error"] = describe_error(exc)
    finally:
        agent.cleanup()
    result["steps"] = [
        {
            "code": getattr(step, "code_action", None),
            "observations": getattr(step, "observations", None),
            "error": str(step.error) if getattr(step, "error", None) else None,
        }
        for step in agent.memory.steps
        if hasattr(step, "code_action")
    ]
    result["log"] = log.getvalue()
    return result


if __name__ == "__main__":
    run(scenario, PACKAGES)
