"""A workflow's steps as a DAG: dependencies (explicit and inferred from references), the
parsed references and conditions of each step, and the checks that make a bad workflow a
load-time error naming the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandgate.workflows.expressions import (
    Condition,
    ExpressionError,
    Reference,
    Template,
    parse_condition,
    parse_reference,
    parse_template,
)

if TYPE_CHECKING:
    from sandgate.config._workflows import WorkflowConfig

__all__ = ["Graph", "GraphError", "Node", "compile_graph"]

#: The parts of a step that are templates (references filled in when it starts).
_TEMPLATE_FIELDS = ("arguments", "inputs", "message", "details")


class GraphError(ValueError):
    """The workflow cannot run as written; the message names the workflow and step."""


@dataclass(frozen=True)
class Node:
    """One step, compiled: what it waits for and how its parts are filled in."""

    id: str
    index: int
    step: Any
    depends_on: tuple[str, ...]
    templates: dict[str, Template]
    when: Condition | None
    for_each: Reference | None


@dataclass(frozen=True)
class Graph:
    name: str
    nodes: dict[str, Node]
    #: Step ids in a topological order that keeps the definition's order where it can.
    order: tuple[str, ...]
    output: Template | None

    def dependents(self, step_id: str) -> list[str]:
        return [n.id for n in self.nodes.values() if step_id in n.depends_on]


def compile_graph(workflow: WorkflowConfig) -> Graph:
    """Compiles ``workflow``; raises ``GraphError`` for an unknown step, a cycle, a bad
    reference or condition, naming the step."""
    ids = [step.id for step in workflow.steps]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise GraphError(f"workflow '{workflow.name}': step id '{duplicates[0]}' is used twice")
    declared_inputs = _declared_inputs(workflow.inputs)
    nodes: dict[str, Node] = {}
    for index, step in enumerate(workflow.steps):
        where = f"workflow '{workflow.name}': step '{step.id}'"
        try:
            node = _node(step, index, set(ids), declared_inputs)
        except ExpressionError as exc:
            raise GraphError(f"{where}: {exc}") from None
        except GraphError as exc:
            raise GraphError(f"{where}: {exc}") from None
        nodes[step.id] = node
    order = _topological(workflow.name, nodes)
    output = None
    if workflow.output is not None:
        try:
            output = parse_template(workflow.output)
            for reference in output.references():
                _check_reference(reference, set(ids), declared_inputs, in_loop=False)
        except (ExpressionError, GraphError) as exc:
            raise GraphError(f"workflow '{workflow.name}': output: {exc}") from None
    return Graph(workflow.name, nodes, order, output)


def _node(step: Any, index: int, ids: set[str], declared_inputs: set[str] | None) -> Node:
    in_loop = step.for_each is not None
    templates: dict[str, Template] = {}
    references: list[Reference] = []
    for name in _TEMPLATE_FIELDS:
        if name in type(step).model_fields:
            template = parse_template(getattr(step, name))
            templates[name] = template
            references += template.references()
    when = parse_condition(step.when) if step.when is not None else None
    if when is not None:
        references += when.references()
    for_each = None
    if step.for_each is not None:
        text = step.for_each.strip()
        if text.startswith("${") and text.endswith("}"):
            text = text[2:-1]
        for_each = parse_reference(text)
        if for_each.root in ("item", "index"):
            raise GraphError("for_each cannot read ${item} or ${index} (they come from it)")
        references.append(for_each)
    depends = list(dict.fromkeys(step.depends_on))
    for name in depends:
        if name not in ids:
            raise GraphError(f"depends_on names '{name}', which is not a step of this workflow")
        if name == step.id:
            raise GraphError("a step cannot depend on itself")
    for reference in references:
        _check_reference(reference, ids, declared_inputs, in_loop=in_loop)
        if reference.step is not None:
            if reference.step == step.id:
                raise GraphError(f"${{{reference.text}}}: a step cannot read its own output")
            if reference.step not in depends:
                depends.append(reference.step)
    return Node(step.id, index, step, tuple(depends), templates, when, for_each)


def _check_reference(
    reference: Reference, ids: set[str], declared_inputs: set[str] | None, *, in_loop: bool
) -> None:
    if reference.root == "steps" and reference.step not in ids:
        raise GraphError(f"${{{reference.text}}}: there is no step '{reference.step}'")
    if reference.root in ("item", "index") and not in_loop:
        raise GraphError(f"${{{reference.text}}}: only a for_each step has ${{{reference.root}}}")
    if reference.root == "inputs" and reference.path and declared_inputs is not None:
        name = str(reference.path[0])
        if name not in declared_inputs:
            raise GraphError(
                f"${{{reference.text}}}: the workflow declares no input '{name}' "
                f"(inputs: {', '.join(sorted(declared_inputs)) or 'none'})"
            )
    if (
        reference.root == "run"
        and reference.path
        and reference.path[0]
        not in (
            "id",
            "workflow",
            "attempt",
        )
    ):
        raise GraphError(f"${{{reference.text}}}: run has id, workflow and attempt")


def _declared_inputs(schema: dict[str, Any]) -> set[str] | None:
    """The input names a schema declares, or None when it allows any (no properties list,
    or additional properties allowed with no properties given)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    if not properties and schema.get("additionalProperties", True) is not False:
        return None
    return set(properties)


def _topological(name: str, nodes: dict[str, Node]) -> tuple[str, ...]:
    """Kahn's algorithm, picking ready steps in definition order; a cycle is named by the
    steps on it."""
    remaining = {node.id: set(node.depends_on) for node in nodes.values()}
    order: list[str] = []
    while remaining:
        ready = sorted(
            (n for n, deps in remaining.items() if not deps), key=lambda n: nodes[n].index
        )
        if not ready:
            cycle = _find_cycle(remaining)
            raise GraphError(
                f"workflow '{name}': steps depend on each other in a cycle: "
                + " → ".join(cycle)
                + f" (step '{cycle[0]}')"
            )
        for step_id in ready:
            order.append(step_id)
            del remaining[step_id]
        for deps in remaining.values():
            deps.difference_update(ready)
    return tuple(order)


def _find_cycle(remaining: dict[str, set[str]]) -> list[str]:
    start = sorted(remaining)[0]
    path: list[str] = []
    seen: dict[str, int] = {}
    current = start
    while current not in seen:
        seen[current] = len(path)
        path.append(current)
        current = sorted(remaining[current] & set(remaining))[0]
    return [*path[seen[current] :], current]
