"""The code-mode agent runner: agents from config, model providers, skills, the loop, runs.

Layout: ``providers/`` (one module per model API, plus the router), ``prompts/`` (templates),
``loop.py`` (the loop), ``steps.py`` (what a run is made of), ``stops.py`` (stop checks),
``execution.py`` (code in the sandbox), ``skills.py``, ``autonomy.py`` (autonomy as policy),
``runner.py`` (sessions and runs), ``_gateway.py`` (the one adapter to the tool gateway).
"""

from __future__ import annotations

from pathlib import Path

from sandgate.agents._gateway import GatewayAdapter
from sandgate.agents.autonomy import with_autonomy
from sandgate.agents.runner import SESSION_METADATA_KEY, AgentRunner
from sandgate.agents.skills import Skill, SkillsHook, load_skills
from sandgate.agents.steps import PUBLIC_EVENTS, RunEvent, RunState
from sandgate.config import Config
from sandgate.sandboxes import SandboxService
from sandgate.sandboxes.publish import staging_dir
from sandgate.store import Store
from sandgate.tools import Gateway, ToolGatewayHook

__all__ = [
    "PUBLIC_EVENTS",
    "SESSION_METADATA_KEY",
    "AgentRunner",
    "GatewayAdapter",
    "RunEvent",
    "RunState",
    "Skill",
    "SkillsHook",
    "build_runner",
    "load_skills",
    "skills_hook",
    "with_autonomy",
]


def skills_hook(config: Config) -> SkillsHook:
    """The sandbox hook that copies each agent's skills into its sandboxes."""
    staging: Path = staging_dir(config.home_dir, "skills")
    return SkillsHook(list(config.agents), load_skills(list(config.skills.paths)), staging)


def build_runner(
    config: Config,
    store: Store,
    sandboxes: SandboxService,
    gateway: Gateway,
    hook: ToolGatewayHook,
    skills: SkillsHook,
) -> AgentRunner:
    return AgentRunner(config, store, sandboxes, GatewayAdapter(gateway, hook, store), skills)
