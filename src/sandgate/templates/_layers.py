"""Builds a team template from a ``BuildPlan`` on a layer backend, one cached layer per step.

``LayerBackend`` is the seam between the plan and an engine: ``_docker_layers`` (one Docker
image layer per step, kept as ``sandgate/template-layer:<key>``) and ``_native_layers`` (one
overlay directory per step under ``<rootfs_dir>/layers/``, no container engine). Both run the
same scripts (``_plan``) the same way, so a template builds to the same tree on either, and
both answer an unchanged prefix of steps from their cache.

``build_image`` walks the actions: a cached layer is reused and logged ``CACHED``; the first
uncached one runs, and so does everything after it. A failing step raises ``StepFailed`` naming
the step (E2B's ``reason.step``) with the tail of its output.
"""

from __future__ import annotations

import dataclasses
import shlex
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from ._context import ContextStore
from ._plan import BASE_STEP, FINALIZE_STEP, Action, BuildPlan, StepState, base_key
from .errors import TemplateBuildError

__all__ = [
    "BuildLog",
    "BuiltImage",
    "FinalConfig",
    "LayerBackend",
    "StepFailed",
    "build_image",
]

#: Labels a built team template carries (read back by the catalog like the shipped ones').
TEMPLATE_ID_LABEL = "sandgate.template.id"
LAYER_KEY_LABEL = "sandgate.layer.key"
#: Images ``from_base_image()`` names; they stand for the shipped ``base`` template here.
E2B_BASE_IMAGES = frozenset({"e2bdev/base", "e2bdev/base:latest"})
#: Lines of a failed step's output kept for its error message.
TAIL_LINES = 20


class BuildLog(Protocol):
    """Receives a build's log lines; ``step`` is E2B's step name (``base``, ``"3"``,
    ``finalize``) or None. Called from the building thread; must not raise."""

    def __call__(self, level: str, step: str | None, message: str) -> None: ...


class StepFailed(TemplateBuildError):
    """A step of a build failed; ``step`` names it as E2B does."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


@dataclasses.dataclass(frozen=True, slots=True)
class FinalConfig:
    """What a built template's sandboxes get (the state after the last step)."""

    envs: dict[str, str]
    user: str
    workdir: str | None
    start_cmd: str | None
    ready_cmd: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class BuiltImage:
    image_ref: str
    image_id: str
    config: FinalConfig
    cached_steps: int
    total_steps: int


class LayerBackend(Protocol):
    """One engine's layers. Handles are opaque strings (an image id, a layer key)."""

    engine: str

    def start(self, image: str | None, tree_ref: str | None, log: BuildLog) -> tuple[str, str]:
        """The starting point: a local (or pullable) ``image``, or the built template
        ``tree_ref``; returns ``(identity, handle)``. Raises ``StepFailed`` (step ``base``)
        naming the image when it cannot be had."""
        ...

    def cached(self, key: str) -> str | None:
        """The handle of the layer built for ``key`` earlier, or None."""
        ...

    def run(
        self,
        parent: str,
        key: str,
        action: Action,
        script: str,
        staging: Path | None,
        log: Callable[[str], None],
    ) -> str:
        """Runs ``script`` over ``parent`` (``staging`` appears at ``/.sandgate-copy``) and
        keeps the result as the layer ``key``; returns its handle. Raises ``StepFailed``."""
        ...

    def finalize(
        self, top: str, repository: str, key: str, config: FinalConfig, labels: dict[str, str]
    ) -> tuple[str, str]:
        """Makes the template's image from the top layer; returns ``(image_ref, image_id)``.
        Raises ``StepFailed`` (step ``finalize``), e.g. when the image has no ``python3``."""
        ...

    def load(self, archive: Iterator[bytes], tag: str, log: BuildLog) -> None:
        """Loads a ``docker load`` archive (a pushed image, ``_pushed``) as ``tag``, the
        starting image of a v1 build. Raises ``StepFailed`` (step ``base``)."""
        ...


def build_image(
    backend: LayerBackend,
    plan: BuildPlan,
    *,
    team_id: str,
    template_id: str,
    template_image: str | None,
    files: ContextStore,
    log: BuildLog,
) -> BuiltImage:
    """Builds ``plan`` (``template_image``: the image of ``fromTemplate``, resolved by the
    caller) and returns the template's image. Raises ``StepFailed``/``TemplateBuildError``."""
    image = plan.from_image
    if image in E2B_BASE_IMAGES:
        raise TemplateBuildError("e2bdev/base must be resolved to the base template first")
    log("info", BASE_STEP, f"[base] FROM {image or plan.from_template}")
    identity, handle = backend.start(image, template_image, log)
    actions, state = plan.actions(base_key(team_id, backend.engine, identity))
    handles = {actions[0].parent: handle}
    total = len(actions)
    cached = 0
    rebuilding = False
    for action in actions:
        label = f"[{action.step}/{len(plan.steps)}]" if action.step != BASE_STEP else "[base]"
        what = _describe(plan, action)
        found = None if rebuilding else backend.cached(action.key)
        if found is not None:
            cached += 1
            handles[action.key] = found
            log("info", action.step, f"CACHED {label} {what}")
            continue
        rebuilding = True
        log("info", action.step, f"{label} {what}")
        script = _with_workdir(action)
        parent = handles[action.parent]
        with tempfile.TemporaryDirectory(prefix="sandgate-step-") as scratch:
            staging = None
            if action.payload_hash is not None and action.copy_src is not None:
                staging = Path(scratch) / "copy"
                staging.mkdir()
                try:
                    files.stage(
                        template_id,
                        action.payload_hash,
                        action.copy_src,
                        action.copy_mode,
                        staging,
                    )
                except TemplateBuildError as exc:
                    raise StepFailed(action.step, str(exc)) from None
            try:
                handles[action.key] = backend.run(
                    parent, action.key, action, script, staging, _step_log(log, action.step)
                )
            except StepFailed as exc:
                raise StepFailed(exc.step, f"{label} {what}: {exc}") from None
    top = actions[-1].key
    config = _final_config(plan, state)
    log("info", FINALIZE_STEP, "[finalize] setting the start command, user and environment")
    final_key = base_key(top, "final", repr(dataclasses.astuple(config)))
    image_ref, image_id = backend.finalize(
        handles[top],
        f"sandgate/template-{template_id}",
        final_key,
        config,
        {TEMPLATE_ID_LABEL: template_id},
    )
    log("info", FINALIZE_STEP, f"built {image_ref} ({cached} of {total} steps from cache)")
    return BuiltImage(image_ref, image_id, config, cached, total)


def _step_log(log: BuildLog, step: str) -> Callable[[str], None]:
    def line(text: str) -> None:
        log("info", step, text)

    return line


def _final_config(plan: BuildPlan, state: StepState) -> FinalConfig:
    return FinalConfig(
        envs=state.envs,
        user=state.user,
        workdir=state.workdir,
        start_cmd=plan.start_cmd,
        ready_cmd=plan.ready_cmd,
    )


def _describe(plan: BuildPlan, action: Action) -> str:
    if action.step == BASE_STEP:
        return "provisioning (user 'user')"
    step = plan.steps[int(action.step) - 1]
    return step.describe()


def _with_workdir(action: Action) -> str:
    """The action's script, run from its working directory (the user's home by default)."""
    script = action.script or "true"
    if action.workdir is None:
        return f'cd "$HOME" 2>/dev/null || cd /\n{script}'
    return f"cd {shlex.quote(action.workdir)} || exit 1\n{script}"
