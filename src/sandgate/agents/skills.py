"""Skills: directories with a ``SKILL.md`` (front matter ``name``, ``description``; then the
body) and any files beside it.

Only names and descriptions enter the prompt. The whole directory is copied into each agent
sandbox at ``/run/sandgate/skills/<name>/`` by ``SkillsHook``, where the model reads the body
and files on demand (``cat /run/sandgate/skills/csv-report/SKILL.md``).

SECURITY: the skills directory sits in the sandbox's mount, which code in the sandbox may
have written to (a planted symlink); like the tool stubs, the copy is built outside the mount
and moved into place with one ``rename``, after removing what was there without following
links. The files are owned by the gateway's user and not writable by the sandbox user.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog
import yaml

from sandgate.config import AgentConfig
from sandgate.errors import ConfigError
from sandgate.store import Sandbox

__all__ = ["SANDBOX_SKILLS", "Skill", "SkillsHook", "load_skills"]

log = structlog.get_logger("sandgate.agents")

SANDBOX_SKILLS = "/run/sandgate/skills"
_AGENT_KEY = "sandgate.agent"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    path: Path


def load_skills(paths: list[Path]) -> dict[str, Skill]:
    """Every skill under ``paths`` by directory name; raises ``ConfigError`` for a
    ``SKILL.md`` without a description."""
    found: dict[str, Skill] = {}
    for root in paths:
        root = root.expanduser()
        if not root.is_dir():
            raise ConfigError(f"skills.paths: {root} is not a directory")
        for manifest in sorted(root.glob("*/SKILL.md")):
            skill = _parse(manifest)
            found.setdefault(skill.name, skill)
    return found


def _parse(manifest: Path) -> Skill:
    text = manifest.read_text(encoding="utf-8")
    meta: dict[str, object] = {}
    body = text
    if text.startswith("---"):
        _, front, body = text.split("---", 2)
        loaded = yaml.safe_load(front) or {}
        if isinstance(loaded, dict):
            meta = loaded
    name = manifest.parent.name
    description = str(meta.get("description", "")).strip()
    if not description:
        raise ConfigError(f"skill {manifest}: the front matter needs a description")
    return Skill(name, description, body.strip(), manifest.parent)


def skills_index(skills: list[Skill]) -> str:
    if not skills:
        return "(none)"
    lines = [f"- {s.name}: {s.description} ({SANDBOX_SKILLS}/{s.name}/SKILL.md)" for s in skills]
    return "Read a skill's SKILL.md before using it.\n" + "\n".join(lines)


class SkillsHook:
    """Copies the skills of a sandbox's agent into its mount (``sandboxes.SandboxHook``)."""

    def __init__(self, agents: list[AgentConfig], skills: dict[str, Skill], staging: Path) -> None:
        self._agents = {a.id: a for a in agents}
        self._skills = skills
        self._staging = staging

    def for_agent(self, agent: AgentConfig) -> list[Skill]:
        return [self._skills[n] for n in agent.skills if n in self._skills]

    def boot_env(self, sandbox: Sandbox) -> dict[str, str]:
        return {}

    async def attach(self, sandbox: Sandbox, host_dir: Path) -> dict[str, str]:
        agent = self._agents.get(str((sandbox.metadata_ or {}).get(_AGENT_KEY, "")))
        if agent is None or not agent.skills:
            return {}
        await asyncio.to_thread(self._install, self.for_agent(agent), host_dir / "skills")
        return {}

    async def detach(self, sandbox_id: str) -> None:
        return None

    def _install(self, skills: list[Skill], target: Path) -> None:
        self._staging.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = Path(tempfile.mkdtemp(prefix="skills-", dir=self._staging))
        try:
            for skill in skills:
                shutil.copytree(skill.path, staging / skill.name, symlinks=False)
            for path in [staging, *staging.rglob("*")]:
                # SECURITY: readable, not writable, by the sandbox user.
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
