"""Third-party agent frameworks that drive E2B, as acceptance clients (issue #11).

Each framework is pinned in its own locked environment (``clients.FRAMEWORKS``) and runs an
unmodified scenario against a real ``sandgate serve`` on both runtimes. Where a framework needs
a model, it talks to the scripted model server (``tests/framework/model_server.py``) over the
OpenAI-compatible API; nothing else stands in for anything.

* OpenAI Agents SDK: its E2B sandbox session (workspace root ``/workspace``, runtime helper
  scripts installed under ``/tmp`` and executed), exec, write/read, an ``apply_patch`` edit, and
  a ``SandboxAgent`` run whose model calls the SDK's ``exec_command`` tool.
* smolagents: ``CodeAgent(executor_type="e2b")`` authorised to import a package the template
  does not have; smolagents ``!pip install``s it in the sandbox's kernel from the test's own
  package index (reached through the egress proxy), then the scripted code imports it.
* langchain-e2b: a Deep Agent whose ``execute``/``write_file``/``edit_file``/``read_file``
  tools run in the sandbox.
* e2b-haystack: a Haystack ``Agent`` with ``E2BToolset`` (bash, write, list, read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.package_index import INDEX_HOST, PackageIndex, build_wheel
from tests.fixtures.server import RunningServer
from tests.framework.envd import create, run
from tests.framework.model_server import ScriptedModelServer, code, text, tool_call

from .clients import FRAMEWORKS, PreparedClient, prepare, spec_named

pytestmark = pytest.mark.compat

OPENAI_AGENTS = "py-openai-agents-0.24.0"
SMOLAGENTS = "py-smolagents-1.26.0"
LANGCHAIN_E2B = "py-langchain-e2b-0.0.6"
E2B_HAYSTACK = "py-e2b-haystack-2.0.0"

#: What each lock installs: the framework, its model client, and the E2B SDK it resolves to.
VERSIONS: dict[str, dict[str, str | None]] = {
    OPENAI_AGENTS: {
        "openai-agents": "0.24.0",
        "openai": "3.57.0",
        "e2b": "2.31.0",
        "e2b-code-interpreter": "2.8.1",
    },
    SMOLAGENTS: {
        "smolagents": "1.26.0",
        "openai": "3.57.0",
        "e2b": "2.63.0",
        "e2b-code-interpreter": "2.11.5",
    },
    LANGCHAIN_E2B: {
        "langchain-e2b": "0.0.6",
        "deepagents": "0.6.12",
        "langchain-openai": "1.7.4",
        "e2b": "2.63.0",
        "e2b-code-interpreter": None,
    },
    E2B_HAYSTACK: {
        "e2b-haystack": "2.0.0",
        "haystack-ai": "3.4.1",
        "e2b": "2.63.0",
        "e2b-code-interpreter": None,
    },
}

NOTE = "/home/user/project/notes.txt"
#: The package smolagents installs: not in any template, served only by the test's index.
PROBE = "sandgate_probe"
PROBE_VERSION = "0.4.2"
PROBE_ANSWER = f"{PROBE} {PROBE_VERSION} from the test index"
PROBE_SOURCE = (
    f'__version__ = "{PROBE_VERSION}"\n\n\n'
    "def describe():\n"
    '    return f"{__name__} {__version__} from the test index"\n'
)


def framework(name: str) -> PreparedClient:
    return prepare(spec_named(name))


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def package_index() -> Iterator[PackageIndex]:
    index = PackageIndex(wheels=[build_wheel(PROBE, PROBE_VERSION, PROBE_SOURCE)]).start()
    yield index
    index.stop()


@pytest.fixture(scope="module")
def index_server(
    package_index: PackageIndex, runtime_server_factory: Callable[..., RunningServer]
) -> RunningServer:
    """A server (on the ``runtime`` dimension) whose egress admits the package index only."""
    return runtime_server_factory(config={"egress": package_index.egress_config()})


@pytest.mark.parametrize("name", [spec.name for spec in FRAMEWORKS])
def test_installed_versions(name: str) -> None:
    expected = VERSIONS[name]
    extra = [package for package in expected if package not in {"e2b", "e2b-code-interpreter"}]
    result = framework(name).run("agents_versions", {}, extra)
    assert result["versions"] == expected


def test_openai_agents_e2b_sandbox_session(
    runtime: str, runtime_e2b_env: dict[str, str], model_server: ScriptedModelServer
) -> None:
    model = f"openai-agents-{runtime}"
    model_server.script(
        model,
        tool_call("exec_command", {"cmd": "cat notes/hello.txt"}),
        text("The note says line 2 was edited."),
    )
    result = framework(OPENAI_AGENTS).run(
        "agents_openai", runtime_e2b_env, [model_server.openai_url, model]
    )

    edited = "line one\nline 2, edited by apply_patch\n"
    assert result["root"] == "/workspace"
    assert result["exec"] == {"exit_code": 0, "stdout": "hello 42\n/workspace\n", "stderr": ""}
    assert result["read"] == "line one\nline two\n"
    assert result["edited"] == edited
    assert result["ls"] == ["hello.txt"]
    assert result["on_disk"] == edited, "the session's workspace must be /workspace in the sandbox"

    assert result["final_output"] == "The note says line 2 was edited."
    requests = model_server.for_model(model)
    assert len(requests) == 2, [r.body for r in requests]
    tool_results = [m for m in requests[1].body["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1, requests[1].body["messages"]
    output = tool_results[0]["content"]
    assert "Process exited with code 0" in output and output.endswith(f"Output:\n{edited}"), output


def test_pip_in_a_sandbox_installs_from_the_test_index(
    index_server: RunningServer, package_index: PackageIndex
) -> None:
    """The smolagents scenario's plumbing on its own: sandbox ``envs`` point pip at the index,
    the egress proxy reaches it, the wheel installs (``--target``, so the outcome does not
    depend on where pip may install by default) and imports. When this passes and the
    smolagents test fails, the failure is in smolagents' path: ``!pip install`` into the
    kernel's environment, or the running kernel not seeing the install."""
    sandbox = create(
        index_server.url,
        index_server.api_key,
        templateID="code-interpreter-v1",
        timeout=300,
        envVars=package_index.pip_env(),
    )
    try:
        installed = run(
            index_server.url,
            sandbox["sandboxID"],
            sandbox["envdAccessToken"],
            f"python3 -m pip install --quiet --target /home/user/probe {PROBE} && "
            f"PYTHONPATH=/home/user/probe python3 -c 'import {PROBE}; print({PROBE}.describe())'",
        )
    finally:
        httpx.delete(
            f"{index_server.url}/sandboxes/{sandbox['sandboxID']}",
            headers={"X-API-Key": index_server.api_key},
        )
    assert (installed.exit_code, installed.stdout) == (0, f"{PROBE_ANSWER}\n"), installed


def test_smolagents_code_agent_installs_a_package_from_the_index(
    runtime: str,
    index_server: RunningServer,
    package_index: PackageIndex,
    model_server: ScriptedModelServer,
) -> None:
    model = f"smolagents-{runtime}"
    model_server.script(model, code(f"import {PROBE}\nfinal_answer({PROBE}.describe())"))
    wheel = package_index.wheels[0]
    downloads_before = package_index.downloads(wheel.filename)

    result = framework(SMOLAGENTS).run(
        "agents_smolagents",
        index_server.env,
        [model_server.openai_url, model, PROBE, json.dumps(package_index.pip_env())],
    )

    explain = _smolagents_failure(result)
    assert result["error"] is None, explain
    assert result["answer"] == PROBE_ANSWER, explain
    assert [step["error"] for step in result["steps"]] == [None], explain
    assert package_index.downloads(wheel.filename) == downloads_before + 1, (
        f"pip in the sandbox did not download {wheel.filename} from the index\n{explain}"
    )
    hosts = {r["host"] for r in package_index.requests}
    assert hosts == {f"{INDEX_HOST}:{package_index.port}"}, hosts


def test_langchain_e2b_deep_agent_tools(
    runtime: str, runtime_e2b_env: dict[str, str], model_server: ScriptedModelServer
) -> None:
    model = f"langchain-e2b-{runtime}"
    model_server.script(
        model,
        tool_call("execute", {"command": "echo hello $((6 * 7)) && pwd"}),
        tool_call("write_file", {"file_path": NOTE, "content": "line one\nline two\n"}),
        tool_call(
            "edit_file", {"file_path": NOTE, "old_string": "line two", "new_string": "line 2"}
        ),
        tool_call("read_file", {"file_path": NOTE}),
        text("The note is written, edited and read."),
    )
    result = framework(LANGCHAIN_E2B).run(
        "agents_langchain", runtime_e2b_env, [model_server.openai_url, model, NOTE]
    )

    assert result["tools"] == [
        {
            "name": "execute",
            "status": "success",
            "content": "hello 42\n/home/user\n\n[Command succeeded with exit code 0]",
        },
        {"name": "write_file", "status": "success", "content": f"Updated file {NOTE}"},
        {
            "name": "edit_file",
            "status": "success",
            "content": f"Successfully replaced 1 instance(s) of the string in '{NOTE}'",
        },
        {"name": "read_file", "status": "success", "content": "     1\tline one\n     2\tline 2"},
    ]
    assert result["final"] == "The note is written, edited and read."
    assert result["read_back"] == "line one\nline 2\n"


def test_e2b_haystack_agent_toolset(
    runtime: str, runtime_e2b_env: dict[str, str], model_server: ScriptedModelServer
) -> None:
    model = f"e2b-haystack-{runtime}"
    model_server.script(
        model,
        tool_call("run_bash_command", {"command": "echo hello $((6 * 7)) && pwd"}),
        tool_call("write_file", {"path": NOTE, "content": "line one\nline two\n"}),
        tool_call("list_directory", {"path": "/home/user/project"}),
        tool_call("read_file", {"path": NOTE}),
        text("The note is written and read."),
    )
    result = framework(E2B_HAYSTACK).run(
        "agents_haystack", runtime_e2b_env, [model_server.openai_url, model, NOTE]
    )

    assert result["tools"] == [
        {
            "name": "run_bash_command",
            "error": False,
            "result": "exit_code: 0\nstdout:\nhello 42\n/home/user\n\nstderr:\n",
        },
        {"name": "write_file", "error": False, "result": f"File written successfully: {NOTE}"},
        {"name": "list_directory", "error": False, "result": "notes.txt"},
        {"name": "read_file", "error": False, "result": "line one\nline two\n"},
    ]
    assert result["final"] == "The note is written and read."
    assert result["read_back"] == "line one\nline two\n"


def _smolagents_failure(result: dict[str, Any]) -> str:
    steps = "\n".join(
        f"step {n}: error={step['error']!r} observations={step['observations']!r}"
        for n, step in enumerate(result["steps"], 1)
    )
    return f"answer={result['answer']!r}\n{steps}\n--- smolagents log ---\n{result['log']}"
