"""A workflow is checked when it is loaded: every error names the workflow and the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sandgate.config import load_config
from sandgate.config._workflows import WorkflowConfig, check_workflow_references
from sandgate.errors import ConfigError
from sandgate.workflows import compile_graph

TOOLS = {"read": True, "write": False}


def workflow(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": "w", "steps": steps, **extra}


def check(data: dict[str, Any]) -> WorkflowConfig:
    return check_workflow_references(
        WorkflowConfig.model_validate(data), TOOLS, {"mcp"}, {"agent1"}
    )


def test_dependencies_are_inferred_from_references_and_ordered() -> None:
    checked = check(
        workflow(
            [
                {
                    "id": "d",
                    "kind": "tool",
                    "tool": "read",
                    "arguments": {"x": "${steps.b.output}", "y": "${steps.c.output}"},
                },
                {"id": "a", "kind": "tool", "tool": "read"},
                {
                    "id": "b",
                    "kind": "tool",
                    "tool": "read",
                    "arguments": {"v": "${steps.a.output}"},
                },
                {
                    "id": "c",
                    "kind": "tool",
                    "tool": "read",
                    "depends_on": ["a"],
                    "when": "steps.a.output != null",
                },
            ]
        )
    )
    graph = compile_graph(checked)
    assert graph.order == ("a", "b", "c", "d")
    assert graph.nodes["d"].depends_on == ("b", "c")
    assert graph.nodes["b"].depends_on == ("a",)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (
            [{"id": "a", "kind": "tool", "tool": "read", "depends_on": ["zz"]}],
            "step 'a': depends_on names 'zz'",
        ),
        (
            [
                {
                    "id": "a",
                    "kind": "tool",
                    "tool": "read",
                    "arguments": {"x": "${steps.b.output}"},
                },
                {
                    "id": "b",
                    "kind": "tool",
                    "tool": "read",
                    "arguments": {"x": "${steps.a.output}"},
                },
            ],
            "cycle: a → b → a",
        ),
        (
            [
                {
                    "id": "a",
                    "kind": "tool",
                    "tool": "read",
                    "arguments": {"x": "${steps.nope.output}"},
                }
            ],
            "step 'a': .*there is no step 'nope'",
        ),
        (
            [{"id": "a", "kind": "tool", "tool": "read", "arguments": {"x": "${item}"}}],
            "step 'a': .*only a for_each step",
        ),
        (
            [{"id": "a", "kind": "tool", "tool": "read", "when": "inputs.x >"}],
            "step 'a': .*ends too early",
        ),
        (
            [{"id": "a", "kind": "tool", "tool": "read", "arguments": {"x": "${steps.a.output}"}}],
            "step 'a': .*its own output",
        ),
        (
            [
                {"id": "a", "kind": "tool", "tool": "read"},
                {"id": "a", "kind": "tool", "tool": "read"},
            ],
            "step id 'a' is used twice",
        ),
        (
            [{"id": "a", "kind": "tool", "tool": "read", "for_each": "${item}"}],
            "for_each cannot read",
        ),
        ([{"id": "A", "kind": "tool", "tool": "read"}], "lowercase identifier"),
    ],
)
def test_bad_workflows_are_refused_naming_the_step(
    steps: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check(workflow(steps))


def test_inputs_must_be_declared_when_the_schema_lists_them() -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string"}}}
    check(
        workflow(
            [{"id": "a", "kind": "tool", "tool": "read", "arguments": {"d": "${inputs.day}"}}],
            inputs=schema,
        )
    )
    with pytest.raises(ValueError, match="declares no input 'month'"):
        check(
            workflow(
                [
                    {
                        "id": "a",
                        "kind": "tool",
                        "tool": "read",
                        "arguments": {"d": "${inputs.month}"},
                    }
                ],
                inputs=schema,
            )
        )


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (
            {"id": "a", "kind": "tool", "tool": "write", "retries": 2},
            "tool 'write' is not marked idempotent",
        ),
        ({"id": "a", "kind": "tool", "tool": "mcp_delete", "retries": 1}, "not marked idempotent"),
        (
            {"id": "a", "kind": "code", "code": "print(1)", "retries": 1},
            "mark the code step idempotent",
        ),
        (
            {"id": "a", "kind": "agent", "agent": "agent1", "message": "m", "retries": 1},
            "an agent step is never run twice",
        ),
        ({"id": "a", "kind": "tool", "tool": "nope"}, "there is no tool 'nope'"),
        (
            {"id": "a", "kind": "agent", "agent": "ghost", "message": "m"},
            "agent 'ghost' is not declared",
        ),
    ],
)
def test_retries_only_for_idempotent_steps_and_references_exist(
    step: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"workflow 'w': step 'a': .*{message}"):
        check(workflow([step]))


def test_idempotent_steps_may_retry() -> None:
    checked = check(
        workflow(
            [
                {"id": "a", "kind": "tool", "tool": "read", "retries": 3},
                {"id": "b", "kind": "code", "code": "print(1)", "idempotent": True, "retries": 1},
            ]
        )
    )
    assert checked.steps[0].idempotent and checked.steps[1].idempotent


def test_a_user_cannot_declare_a_write_idempotent() -> None:
    checked = check(
        workflow([{"id": "a", "kind": "tool", "tool": "write", "tool_idempotent": True}])
    )
    assert checked.steps[0].idempotent is False


@pytest.mark.parametrize("cron", ["0 6 * * *", "*/5 * * * * *"])
def test_schedules_are_cron(cron: str) -> None:
    assert check(workflow([{"id": "a", "kind": "tool", "tool": "read"}], schedule=cron))


def test_a_bad_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="not a cron expression"):
        check(workflow([{"id": "a", "kind": "tool", "tool": "read"}], schedule="every day"))


def test_config_errors_name_the_workflow_and_step(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "tools": [{"name": "kv", "kind": "builtin"}],
                "workflows": [
                    workflow([{"id": "save", "kind": "tool", "tool": "kv", "retries": 1}])
                ],
            }
        )
    )
    with pytest.raises(ConfigError, match="workflow 'w': step 'save': retries need an idempotent"):
        load_config(path, environ={})


def test_workflows_section_takes_a_list_or_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    steps = [{"id": "a", "kind": "tool", "tool": "kv", "arguments": {"op": "list"}}]
    path.write_text(
        yaml.safe_dump(
            {
                "tools": [{"name": "kv", "kind": "builtin"}],
                "workflows": {"definitions": [workflow(steps)], "paths": ["flows"]},
            }
        )
    )
    config = load_config(path, environ={})
    assert config.workflows.paths == ["flows"]
    assert [w.name for w in config.workflows.definitions] == ["w"]
