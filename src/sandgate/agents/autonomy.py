"""Autonomy as policy: ``suggest`` and ``semi`` agents get stricter copies of the rules.

The gateway's policy is deny-overrides: of the matching rules a deny wins, then an ask, then an
allow, and the first rule of the winning effect decides. For an agent with ``autonomy:
suggest`` every rule that could apply to it is copied, narrowed to that agent, with ``allow``
turned into ``ask``: whenever an allow matched for that agent its ``ask`` copy matches too and
outranks it. For ``semi`` the copies keep their effect but lose ``allow_high_risk``; they go
before the original rules, so the first matching allow (the one that decides, and whose
``allow_high_risk`` counts) is a copy, and the pipeline asks a person before a high-risk tool
runs. A ``deny`` stays a deny. ``auto`` agents are left to the policy as written.
"""

from __future__ import annotations

from sandgate.config import AgentConfig, Config, PolicyConfig, PolicyRule

__all__ = ["with_autonomy"]


def with_autonomy(config: Config) -> Config:
    """``config`` with its policy rewritten for the agents' autonomy (see module docstring)."""
    extra: list[PolicyRule] = []
    for agent in config.agents:
        if agent.autonomy != "auto":
            extra += _stricter(config.policy.rules, agent)
    if not extra:
        return config
    policy = PolicyConfig(
        rules=[*extra, *config.policy.rules], budget_per_sandbox=config.policy.budget_per_sandbox
    )
    return config.model_copy(update={"policy": policy})


def _stricter(rules: list[PolicyRule], agent: AgentConfig) -> list[PolicyRule]:
    copies = []
    for rule in rules:
        agents = rule.subject.agent
        if agents is not None and agent.id not in agents:
            continue
        subject = rule.subject.model_copy(update={"agent": [agent.id]})
        update: dict[str, object] = {
            "id": f"{rule.id}@{agent.autonomy}:{agent.id}"[:100],
            "subject": subject,
            "allow_high_risk": False,
        }
        if agent.autonomy == "suggest" and rule.effect == "allow":
            update["effect"] = "ask"
        copies.append(rule.model_copy(update=update))
    return copies
