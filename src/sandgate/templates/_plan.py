"""A template build as the E2B SDKs describe it (``TemplateBuildStartV2``), checked and turned
into the list of actions both layer backends run.

The SDK sends a starting point (``fromImage`` or ``fromTemplate``), ``steps`` of five kinds
(``COPY``, ``RUN``, ``ENV``, ``WORKDIR``, ``USER``; every builder method, ``apt_install`` to
``make_symlink``, arrives as one of these), a start and a ready command. ``parse_plan`` refuses
anything else with a message naming the step, before any work starts.

Each action has a cache key chained from the previous one (``sha256(parent key, action)``), so a
changed step invalidates itself and everything after it, and an unchanged prefix is answered
from the layer cache on either engine. A step's key also covers the build state it runs in
(user, working directory, environment), the team (layers are never shared between teams) and,
for ``force``/``skip_cache``, a fresh nonce.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from sandgate.errors import InvalidRequest

__all__ = [
    "BASE_STEP",
    "DEFAULT_USER",
    "FINALIZE_STEP",
    "Action",
    "BuildPlan",
    "Step",
    "StepKind",
    "StepState",
    "parse_plan",
]

#: E2B's names for the phases around the numbered steps (``reason.step`` of a failed build).
BASE_STEP = "base"
FINALIZE_STEP = "finalize"
#: E2B templates run build steps, and sandboxes, as ``user`` unless told otherwise.
DEFAULT_USER = "user"
_MAX_STEPS = 256
_MAX_ARG = 64 * 1024
_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HASH = re.compile(r"[0-9a-f]{64}")
_MODE = re.compile(r"0?[0-7]{3,4}")


class StepKind(enum.StrEnum):
    COPY = "COPY"
    RUN = "RUN"
    ENV = "ENV"
    WORKDIR = "WORKDIR"
    USER = "USER"


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One step as sent, numbered from 1 (E2B counts the base as step 0)."""

    number: int
    kind: StepKind
    args: tuple[str, ...]
    files_hash: str | None = None
    force: bool = False

    def describe(self) -> str:
        """How the step appears in logs: ``[3/12] RUN pip install numpy``."""
        text = " ".join(self.args[:1] if self.kind is StepKind.RUN else self.args)
        return f"{self.kind.value} {text}"[:300]


@dataclasses.dataclass(frozen=True, slots=True)
class StepState:
    """What a step runs under: the user, working directory and environment set so far."""

    user: str = DEFAULT_USER
    #: None: the user's home (E2B's default workdir follows the user until one is set).
    workdir: str | None = None
    env: tuple[tuple[str, str], ...] = ()

    @property
    def envs(self) -> dict[str, str]:
        return dict(self.env)


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """What a backend does for one step: run ``script`` as ``user`` in ``workdir`` with ``env``
    (over the layer keyed ``parent``), producing the layer ``key``. ``payload_hash`` names
    the uploaded files a ``COPY`` brings along (staged at ``/.sandgate-copy/payload``)."""

    step: str
    key: str
    parent: str
    script: str | None
    user: str
    workdir: str | None
    env: tuple[tuple[str, str], ...]
    payload_hash: str | None = None
    copy_src: str | None = None
    copy_mode: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BuildPlan:
    from_image: str | None
    from_template: str | None
    steps: tuple[Step, ...]
    start_cmd: str | None
    ready_cmd: str | None
    force: bool

    def actions(self, base_key: str) -> tuple[list[Action], StepState]:
        """The base provisioning and every step as actions chained from ``base_key`` (the
        team and the starting image's identity); returns them and the final state."""
        state = StepState()
        forced = self.force
        provision = _key(base_key, "provision", _PROVISION)
        actions = [Action(BASE_STEP, provision, base_key, _PROVISION, "root", "/", ())]
        parent = provision
        for step in self.steps:
            forced = forced or step.force
            nonce = secrets.token_hex(16) if forced else ""
            before = state
            script, user, workdir, state = _apply(step, state)
            key = _key(
                parent,
                step.kind.value,
                json.dumps([list(step.args), step.files_hash, dataclasses.astuple(before)]),
                nonce,
            )
            if script is None:
                continue  # ENV: state only; a forced ENV forces every later step anyway
            actions.append(
                Action(
                    str(step.number),
                    key,
                    parent,
                    script,
                    user,
                    workdir,
                    state.env if step.kind is not StepKind.USER else before.env,
                    payload_hash=step.files_hash,
                    copy_src=step.args[0] if step.kind is StepKind.COPY else None,
                    copy_mode=(step.args[3] or None) if step.kind is StepKind.COPY else None,
                )
            )
            parent = key
        return actions, state


#: Makes sure the E2B default user exists in any starting image (E2B's own provisioning
#: does the same): Debian's useradd, Alpine's adduser, else a passwd line.
_PROVISION = """
if ! id -u user >/dev/null 2>&1; then
  if command -v useradd >/dev/null 2>&1; then
    useradd -m -s /bin/bash user 2>/dev/null || useradd -m user
  elif command -v adduser >/dev/null 2>&1; then
    adduser -D user
  else
    echo 'user:x:1000:1000::/home/user:/bin/sh' >> /etc/passwd
    echo 'user:x:1000:' >> /etc/group
    mkdir -p /home/user && chown 1000:1000 /home/user
  fi
fi
"""


def _apply(step: Step, state: StepState) -> tuple[str | None, str, str | None, StepState]:
    """The step's script, the user and workdir it runs as, and the state after it."""
    args = step.args
    if step.kind is StepKind.ENV:
        env = dict(state.env)
        env.update(zip(args[0::2], args[1::2], strict=True))
        return None, state.user, state.workdir, dataclasses.replace(state, env=tuple(env.items()))
    if step.kind is StepKind.USER:
        name = args[0]
        script = (
            f"id -u {name} >/dev/null 2>&1 || useradd -m -s /bin/bash {name} "
            f"2>/dev/null || adduser -D {name}"
        )
        return script, "root", "/", dataclasses.replace(state, user=name)
    if step.kind is StepKind.WORKDIR:
        path = _absolute(args[0], state.workdir)
        quoted = shlex.quote(path)
        owner = shlex.quote(state.user)
        script = f"[ -d {quoted} ] || {{ mkdir -p {quoted} && chown {owner}: {quoted}; }}"
        return script, "root", "/", dataclasses.replace(state, workdir=path)
    if step.kind is StepKind.RUN:
        user = args[1] if len(args) > 1 and args[1] else state.user
        return args[0], user, state.workdir, state
    # COPY: src, dest, user, mode. The payload is staged at /.sandgate-copy/payload with its
    # modes already applied; ownership and the Docker-like destination rules happen here.
    owner = args[2] if len(args) > 2 and args[2] else state.user
    dest = _absolute(args[1], state.workdir)
    into_dir = args[1].endswith("/")
    script = _copy_script(dest, owner, into_dir)
    return script, "root", "/", state


def _copy_script(dest: str, owner: str, into_dir: bool) -> str:
    """Moves the staged payload to ``dest`` as ``docker COPY`` would. The stager leaves
    ``/.sandgate-copy/payload`` (the matched entries; for a single matched directory, its
    contents) and ``kind`` (``dir`` or ``entries``). A directory's contents land in ``dest``;
    one file lands at ``dest`` (inside it when it ends with ``/`` or is a directory); several
    entries land in the directory ``dest``. Existing directories keep their owner and mode."""
    quoted = shlex.quote(dest)
    spec = owner if ":" in owner else f"{owner}:"
    chown = shlex.quote(spec)
    return f"""set -e
cd /.sandgate-copy
chown -hR {chown} payload
entries=$(find payload -mindepth 1 -maxdepth 1 | wc -l)
single=0
[ "$(cat kind)" = entries ] && [ "$entries" = 1 ] && [ {int(into_dir)} = 0 ] && single=1
if [ $single = 1 ] && [ ! -d {quoted} ]; then
  mkdir -p "$(dirname {quoted})"
  cp -a "$(find payload -mindepth 1 -maxdepth 1)" {quoted}
else
  if [ ! -d {quoted} ]; then mkdir -p {quoted}; chown {chown} {quoted}; fi
  find payload -mindepth 1 -maxdepth 1 -exec cp -a {{}} {quoted}/ \\;
fi
cd /
rm -rf /.sandgate-copy
"""


def _absolute(path: str, workdir: str | None) -> str:
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    base = workdir or f"/home/{DEFAULT_USER}"
    return f"{base.rstrip('/')}/{path}".rstrip("/")


def _key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode()
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def base_key(team_id: str, engine: str, base_identity: str) -> str:
    """The key of the starting image for one team on one engine (recipe-versioned)."""
    return _key("sandgate-template-layers/1", team_id, engine, base_identity)


def parse_plan(body: Mapping[str, Any]) -> BuildPlan:
    """Checks a ``TemplateBuildStartV2`` body; raises ``InvalidRequest`` naming the bad field
    or step. Registry credentials (``fromImageRegistry``) are refused: no registry login
    is supported."""
    from_image = _optional_str(body, "fromImage")
    from_template = _optional_str(body, "fromTemplate")
    if (from_image is None) == (from_template is None):
        raise InvalidRequest("give exactly one of fromImage and fromTemplate")
    if body.get("fromImageRegistry") not in (None, {}):
        raise InvalidRequest(
            "registry credentials (from_image with username/password, from_aws_registry, "
            "from_gcp_registry) are not supported: load the image into the server's Docker "
            "engine (`docker load`) and use from_image with its name"
        )
    raw_steps = body.get("steps", [])
    if not isinstance(raw_steps, list) or len(raw_steps) > _MAX_STEPS:
        raise InvalidRequest(f"steps must be a list of at most {_MAX_STEPS} steps")
    steps = tuple(_step(number, raw) for number, raw in enumerate(raw_steps, start=1))
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise InvalidRequest("force must be true or false")
    return BuildPlan(
        from_image=from_image,
        from_template=from_template,
        steps=steps,
        start_cmd=_optional_str(body, "startCmd"),
        ready_cmd=_optional_str(body, "readyCmd"),
        force=force,
    )


def _step(number: int, raw: Any) -> Step:
    where = f"step {number}"
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where}: must be an object")
    try:
        kind = StepKind(str(raw.get("type")))
    except ValueError:
        known = ", ".join(k.value for k in StepKind)
        raise InvalidRequest(
            f"{where}: unknown step type {raw.get('type')!r} (supported: {known})"
        ) from None
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidRequest(f"{where}: args must be a list of strings")
    if any(len(a) > _MAX_ARG or "\x00" in a for a in args):
        raise InvalidRequest(f"{where}: an argument is too long or contains NUL")
    force = raw.get("force") or False
    if not isinstance(force, bool):
        raise InvalidRequest(f"{where}: force must be true or false")
    files_hash = raw.get("filesHash")
    _check_args(where, kind, args, files_hash)
    return Step(number, kind, tuple(args), files_hash, force)


def _check_args(where: str, kind: StepKind, args: Sequence[str], files_hash: Any) -> None:
    if kind is StepKind.RUN:
        if not 1 <= len(args) <= 2 or not args[0].strip():
            raise InvalidRequest(f"{where}: RUN needs a command (and optionally a user)")
        if len(args) == 2 and args[1] and not _NAME.fullmatch(args[1]):
            raise InvalidRequest(f"{where}: invalid user name {args[1]!r}")
    elif kind is StepKind.ENV:
        if not args or len(args) % 2:
            raise InvalidRequest(f"{where}: ENV needs name/value pairs")
        for name in args[0::2]:
            if not _ENV_NAME.fullmatch(name):
                raise InvalidRequest(f"{where}: invalid environment variable name {name!r}")
    elif kind is StepKind.WORKDIR:
        if len(args) != 1 or not args[0] or "\n" in args[0]:
            raise InvalidRequest(f"{where}: WORKDIR needs one path")
    elif kind is StepKind.USER:
        if len(args) != 1 or not _NAME.fullmatch(args[0]):
            raise InvalidRequest(
                f"{where}: USER needs one user name (lowercase letters, digits, _ and -)"
            )
    else:
        if len(args) < 2 or not args[0] or not args[1]:
            raise InvalidRequest(f"{where}: COPY needs a source and a destination")
        owner = args[2] if len(args) > 2 else ""
        if owner and not all(_NAME.fullmatch(part) for part in owner.split(":", 1)):
            raise InvalidRequest(f"{where}: invalid owner {owner!r} (user or user:group)")
        mode = args[3] if len(args) > 3 else ""
        if mode and not _MODE.fullmatch(mode):
            raise InvalidRequest(f"{where}: invalid mode {mode!r} (octal, e.g. 0755)")
        if not isinstance(files_hash, str) or not _HASH.fullmatch(files_hash):
            raise InvalidRequest(f"{where}: COPY needs the filesHash of its uploaded files")


def _optional_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > _MAX_ARG:
        raise InvalidRequest(f"{key} must be a string")
    return value
