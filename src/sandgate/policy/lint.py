"""``sandgate policy lint``: rules that can never match, and rules that can never take effect.

Every finding is a proof, never a guess: a rule is reported only when the reason holds for
every possible call. What lint cannot prove it stays silent about (docs/tools.md lists what it
cannot see: relations between two different regular expressions, team, key, sandbox and
metadata values, MCP tools before their server has listed them, several rules that only
together cover another).

Kinds of finding:

* ``never-matches``: no call can satisfy the rule (a tool pattern that names no declared tool,
  an agent that is not declared, an action none of its tools has, an argument its tools refuse,
  contradictory checks such as ``min`` above ``max``).
* ``unknown-argument``: a condition on an argument none of its tools declares; it matches only
  calls that pass an undeclared argument, which is almost always a typo.
* ``shadowed``: the rule matches, but never decides: a ``deny`` (anywhere in the list) matches
  every call it matches (deny-overrides); an ``ask`` does so for an ``allow``; or an earlier
  rule of the same effect does, so that rule always speaks instead (an exact duplicate, a rule
  after a broader one).

"Covers" (rule A matches every call rule B matches) is checked field by field, conservatively:
equal globs, a ``*`` glob, a literal that the other glob matches, a ``prefix*`` glob; declared
tool names and agents concretely; ``equals``/``one_of`` values by evaluating the other rule's
checks on them; equal patterns, and ``full_match: X`` implying ``matches: X``; numeric bounds
by comparison; time windows by containment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sandgate.config import PolicyConfig
from sandgate.policy.conditions import ArgCheck
from sandgate.policy.patterns import Pattern, Undecidable, glob_covers, glob_is_literal
from sandgate.policy.rules import CompiledRule

__all__ = ["Finding", "ToolShape", "lint"]

Kind = Literal["never-matches", "unknown-argument", "shadowed"]


@dataclass(frozen=True)
class ToolShape:
    """What lint knows of a declared tool before the gateway starts.

    For an MCP server, ``prefix`` is true: its tools are named ``<name>_<tool>`` and their
    schemas are unknown until the server lists them, so lint assumes any such name can exist.
    """

    name: str
    parameters: Mapping[str, Any]
    action: str | None = None
    prefix: bool = False

    @property
    def properties(self) -> Mapping[str, Any]:
        props = self.parameters.get("properties", {})
        return props if isinstance(props, Mapping) else {}

    @property
    def closed(self) -> bool:
        """The schema refuses arguments it does not declare."""
        return self.parameters.get("additionalProperties", True) is False

    @property
    def actions(self) -> list[str] | None:
        """The action parameter's enum, or None when any value may come."""
        if self.action is None:
            return None
        enum = self.properties.get(self.action, {}).get("enum")
        return [str(v) for v in enum] if isinstance(enum, list) else None


@dataclass(frozen=True)
class Finding:
    rule: str
    effect: str
    kind: Kind
    reason: str
    by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "effect": self.effect,
            "kind": self.kind,
            "reason": self.reason,
            "by": self.by,
        }

    def line(self) -> str:
        return f"{self.effect} rule '{self.rule}': {self.kind}: {self.reason}"


def lint(policy: PolicyConfig, tools: Sequence[ToolShape], agents: Sequence[str]) -> list[Finding]:
    """The findings for ``policy``, in rule order (empty when there is nothing to report).

    ``tools`` are the declared tools (``tools.registry.tool_shapes``); ``agents`` the declared
    agent ids (a sandbox acts only as a declared agent, or as none).
    """
    linter = _Linter(tools, agents)
    rules = [CompiledRule.compile(rule) for rule in policy.rules]
    findings: list[Finding] = []
    dead: set[str] = set()
    for rule in rules:
        found = linter.never_matches(rule)
        if any(f.kind == "never-matches" for f in found):
            dead.add(rule.id)
        findings += found
    live = [rule for rule in rules if rule.id not in dead]
    for index, rule in enumerate(live):
        shadow = linter.shadowing(rule, live, index)
        if shadow is not None:
            findings.append(shadow)
    order = {rule.id: i for i, rule in enumerate(rules)}
    return sorted(findings, key=lambda f: order[f.rule])


class _Linter:
    def __init__(self, tools: Sequence[ToolShape], agents: Sequence[str]) -> None:
        self._known = [tool for tool in tools if not tool.prefix]
        self._prefixes = [f"{tool.name}_" for tool in tools if tool.prefix]
        self._agents = list(agents)

    # -- never matches ------------------------------------------------------------------

    def never_matches(self, rule: CompiledRule) -> list[Finding]:
        def finding(reason: str, kind: Kind = "never-matches") -> Finding:
            return Finding(rule.id, rule.effect, kind, reason)

        found: list[Finding] = []
        known, is_open = self._scope(rule.tools)
        if not known and not is_open:
            found.append(finding(f"tool {rule.rule.tool} matches no declared tool"))
        agents = dict(rule.subject).get("agent")
        if agents is not None and not _matching(agents, self._agents):
            declared = ", ".join(self._agents) or "none"
            found.append(
                finding(
                    f"subject.agent {[p.source for p in agents]} matches no declared agent "
                    f"(declared: {declared}); a sandbox acts only as a declared agent"
                )
            )
        if rule.actions is not None and known and not is_open:
            found += [finding(reason) for reason in _action_problems(rule.actions, known)]
        for check in rule.args:
            found += [finding(reason) for reason in _contradictions(check)]
            if known and not is_open:
                found += [finding(r, k) for k, r in _schema_problems(check, known)]
        return found

    def _scope(self, patterns: tuple[Pattern, ...]) -> tuple[list[ToolShape], bool]:
        """The declared tools the globs match, and whether they may match an MCP tool."""
        known = [tool for tool in self._known if any(p.test(tool.name) for p in patterns)]
        is_open = any(
            _may_match_prefix(p.source, prefix) for p in patterns for prefix in self._prefixes
        )
        return known, is_open

    # -- shadowing ----------------------------------------------------------------------

    def shadowing(
        self, rule: CompiledRule, rules: Sequence[CompiledRule], index: int
    ) -> Finding | None:
        """The strongest reason ``rule`` never decides, if one can be proven."""

        def finding(by: CompiledRule, reason: str) -> Finding:
            return Finding(rule.id, rule.effect, "shadowed", reason, by.id)

        if rule.effect != "deny":
            for other in rules:
                if other.effect == "deny" and self.covers(other, rule):
                    return finding(
                        other,
                        f"deny rule '{other.id}' matches every call this rule matches, "
                        "and a deny wins wherever it stands",
                    )
        if rule.effect == "allow":
            for other in rules:
                if other.effect == "ask" and self.covers(other, rule):
                    return finding(
                        other,
                        f"ask rule '{other.id}' matches every call this rule matches, so "
                        "each of them asks a person (ask outranks allow)",
                    )
        for other in rules[:index]:
            if other.effect != rule.effect:
                continue
            if _conditions(other) == _conditions(rule):
                return finding(
                    other, f"it has the same conditions as '{other.id}', which comes first"
                )
            if self.covers(other, rule):
                return finding(
                    other,
                    f"'{other.id}' comes first, has the same effect and matches every call "
                    "this rule matches, so it always decides instead (its options apply)",
                )
        return None

    def covers(self, outer: CompiledRule, inner: CompiledRule) -> bool:
        """Provably, every call ``inner`` matches is matched by ``outer``."""
        outer_subject, inner_subject = dict(outer.subject), dict(inner.subject)
        for name, patterns in outer_subject.items():
            own = inner_subject.get(name)
            if own is None:
                return False
            if name == "agent":
                if not set(_matching(own, self._agents)) <= set(_matching(patterns, self._agents)):
                    return False
            elif not _globs_cover(patterns, own):
                return False
        inner_metadata = dict(inner.metadata)
        for key, pattern in outer.metadata:
            own_glob = inner_metadata.get(key)
            if own_glob is None or not glob_covers(pattern.source, own_glob.source):
                return False
        if not self._tools_cover(outer.tools, inner.tools):
            return False
        if outer.actions is not None and not self._actions_cover(outer, inner):
            return False
        inner_args = {check.name: check for check in inner.args}
        for check in outer.args:
            own_check = inner_args.get(check.name)
            if own_check is None or not _implies(own_check, check):
                return False
        return _window_covers(outer, inner)

    def _tools_cover(self, outer: tuple[Pattern, ...], inner: tuple[Pattern, ...]) -> bool:
        for pattern in inner:
            if any(glob_covers(o.source, pattern.source) for o in outer):
                continue
            known, is_open = self._scope((pattern,))
            if is_open or not all(any(o.test(t.name) for o in outer) for t in known):
                return False
        return True

    def _actions_cover(self, outer: CompiledRule, inner: CompiledRule) -> bool:
        if outer.actions is None:
            return True
        if inner.actions is None:
            return False
        if _globs_cover(outer.actions, inner.actions):
            return True
        # Validation holds an action to its tool's enum, so within declared tools whose
        # actions are all listed, comparing the listed values is exact.
        known, is_open = self._scope(inner.tools)
        if is_open or not known or any(tool.actions is None for tool in known):
            return False
        values = {value for tool in known for value in tool.actions or []}
        return set(_matching(inner.actions, values)) <= set(_matching(outer.actions, values))


def _conditions(rule: CompiledRule) -> dict[str, Any]:
    return rule.rule.model_dump(
        exclude={"id", "effect", "rate_limit", "allow_high_risk", "approval_timeout_s"}
    )


def _matching(patterns: tuple[Pattern, ...], values: Iterable[str]) -> list[str]:
    return [value for value in values if any(p.test(value) for p in patterns)]


def _globs_cover(outer: tuple[Pattern, ...], inner: tuple[Pattern, ...]) -> bool:
    return all(any(glob_covers(o.source, i.source) for o in outer) for i in inner)


def _may_match_prefix(glob: str, prefix: str) -> bool:
    """Whether ``glob`` might match some name starting with ``prefix`` (conservative)."""
    if glob_is_literal(glob):
        return glob.startswith(prefix)
    head = glob[: min(glob.find(c) for c in "*?[" if c in glob)]
    return head.startswith(prefix) or prefix.startswith(head)


def _action_problems(actions: tuple[Pattern, ...], known: list[ToolShape]) -> list[str]:
    with_action = [tool for tool in known if tool.action is not None]
    names = ", ".join(tool.name for tool in known)
    if not with_action:
        return [f"it names an action, but none of its tools ({names}) has an action parameter"]
    if any(tool.actions is None for tool in with_action):
        return []
    listed = {value for tool in with_action for value in tool.actions or []}
    if _matching(actions, listed):
        return []
    return [
        f"action {[p.source for p in actions]} is none of its tools' actions "
        f"({', '.join(sorted(listed))})"
    ]


def _candidates(check: ArgCheck) -> list[Any] | None:
    """The values an ``equals``/``one_of`` condition can match, with their ``==`` twins
    (``1``, ``1.0`` and ``True`` are equal in Python but not alike for every check)."""
    condition = check.condition
    if condition.has_equals:
        values = [condition.equals]
    elif condition.one_of is not None:
        values = list(condition.one_of)
    else:
        return None
    twins: list[Any] = []
    for value in values:
        twins.append(value)
        if isinstance(value, int | float) and value in (0, 1):
            twins += [bool(value), int(value), float(value)]
    return twins


def _survivors(check: ArgCheck) -> list[Any] | None:
    candidates = _candidates(check)
    if candidates is None:
        return None
    return [value for value in candidates if _holds(check, value) is not False]


def _holds(check: ArgCheck, value: Any) -> bool | None:
    """``check.holds(value)``, or None when it cannot be judged."""
    try:
        return check.holds(value)
    except Undecidable:
        return None


def _contradictions(check: ArgCheck) -> list[str]:
    condition, where = check.condition, f"args.{check.name}"
    numeric = condition.min is not None or condition.max is not None
    if condition.min is not None and condition.max is not None and condition.min > condition.max:
        return [f"{where}: min {condition.min:g} is above max {condition.max:g}"]
    if check.patterns and numeric:
        return [f"{where}: a pattern needs a string, and min/max a number"]
    survivors = _survivors(check)
    if survivors is not None and not survivors:
        return [f"{where}: no value given by equals/one_of passes its other checks"]
    return []


def _schema_problems(check: ArgCheck, known: list[ToolShape]) -> list[tuple[Kind, str]]:
    where = f"args.{check.name}"
    declaring = [tool for tool in known if check.name in tool.properties]
    names = ", ".join(tool.name for tool in known)
    if not declaring:
        if all(tool.closed for tool in known):
            return [
                (
                    "never-matches",
                    f"{where}: none of its tools ({names}) has a parameter '{check.name}', "
                    "and their schemas refuse other arguments",
                )
            ]
        return [
            (
                "unknown-argument",
                f"{where}: none of its tools ({names}) has a parameter '{check.name}'; it "
                "matches only calls that pass an undeclared argument",
            )
        ]
    if any(not tool.closed for tool in known if tool not in declaring):
        return []  # a tool without the parameter may still be passed it, as any type
    types = [_types(tool.properties[check.name]) for tool in declaring]
    if any(t is None for t in types):
        return []
    allowed = set().union(*(t for t in types if t is not None))
    condition = check.condition
    kinds = " or ".join(sorted(allowed))
    if check.patterns and "string" not in allowed:
        return [("never-matches", f"{where}: a pattern needs a string, but it is {kinds}")]
    numeric = condition.min is not None or condition.max is not None
    if numeric and not allowed & {"number", "integer"}:
        return [("never-matches", f"{where}: min/max need a number, but it is {kinds}")]
    return []


def _types(schema: Any) -> set[str] | None:
    kinds = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(kinds, str):
        return {kinds}
    if isinstance(kinds, list) and all(isinstance(k, str) for k in kinds):
        return set(kinds)
    return None


def _implies(inner: ArgCheck, outer: ArgCheck) -> bool:
    """Provably, every value passing ``inner`` passes ``outer``."""
    survivors = _survivors(inner)
    if survivors is not None:
        return all(_holds(outer, value) is True for value in survivors)
    condition, own = outer.condition, inner.condition
    if condition.has_equals or condition.one_of is not None:
        return False
    own_patterns = set(own.patterns())
    for operator, source in condition.patterns():
        if (operator, source) in own_patterns:
            continue
        if operator == "matches" and ("full_match", source) in own_patterns:
            continue
        if operator == "glob" and any(
            op == "glob" and glob_covers(source, own_source) for op, own_source in own_patterns
        ):
            continue
        if own_patterns and (
            (operator == "glob" and set(source) == {"*"}) or (operator == "matches" and not source)
        ):
            continue  # any string passes, and ``inner`` holds only for strings
        return False
    if condition.min is not None and (own.min is None or own.min < condition.min):
        return False
    return condition.max is None or (own.max is not None and own.max <= condition.max)


def _window_covers(outer: CompiledRule, inner: CompiledRule) -> bool:
    window, own = outer.rule.time, inner.rule.time
    if window is None:
        return True
    if own is None or own.tz != window.tz or not set(own.days) <= set(window.days):
        return False
    return window.start_minute <= own.start_minute and own.end_minute <= window.end_minute
