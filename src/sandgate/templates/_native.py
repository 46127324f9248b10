"""Builds the shipped templates as plain root-filesystem directories, with no container
engine: the daemonless path for the bwrap runtime (a laptop, a CI runner, a small VM).

A root template starts from ``debootstrap`` (kept under ``<rootfs_dir>/bootstrap/<digest>/``
so later builds skip it); a child starts from a copy of its parent's tree. The template's
Dockerfile (the subset ``_dockerfile`` reads) then runs against that tree: ``RUN`` steps
execute under bubblewrap with the tree as ``/`` (as root, sharing the host's network, like a
``docker build`` step), ``COPY`` copies from the staged build context, ``ENV``/``WORKDIR``/
``LABEL`` are recorded. The result lands, atomically (rename, metadata last), where the bwrap
runtime looks for an image's root file system: ``<rootfs_dir>/by-name/<ref>/`` and
``<ref>.json``, with ``ref`` = ``sandgate/template-<name>:<digest[:12]>``.

Trust: the inputs are Sandgate's own build contexts, Debian packages and PyPI packages, as for
the Docker build; the tree is only ever mounted read-only and ``nosuid`` into sandboxes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sandgate._atomic import write_atomic
from sandgate.runtimes import by_name_dir

from ._builder import (
    BASE_LABEL,
    DIGEST_LABEL,
    TEMPLATE_LABEL,
    BuiltTemplate,
    TemplateState,
)
from ._builder import staged_context as _staged
from ._digest import package_list, rootfs_digest, template_digest
from ._dockerfile import Instruction, expand, key_values, parse_dockerfile
from ._progress import BuildStep, ProgressCallback, ignore_progress
from ._rootfs import (
    DEFAULT_MIRROR,
    SUITE,
    VARIANT,
    bootstrap_tree,
    remove_tree,
    run_streaming,
)
from ._spec import SHIPPED_TEMPLATES, TemplateSpec, default_images_dir
from .errors import TemplateBuildError

__all__ = ["NativeTemplateBuilder"]

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NATIVE_PREFIX = "native:"


class NativeTemplateBuilder:
    """The engine-less counterpart of ``TemplateBuilder`` (same ``build``/``status``/
    ``state``/``ensure``), writing into ``rootfs_dir`` (the bwrap runtime's)."""

    def __init__(
        self,
        rootfs_dir: Path,
        *,
        mirror: str = DEFAULT_MIRROR,
        on_progress: ProgressCallback = ignore_progress,
        images_dir: Path | None = None,
        image_namespace: str = "sandgate",
    ) -> None:
        self._dir = rootfs_dir
        self._mirror = mirror
        self._on_progress = on_progress
        self._images_dir = images_dir or default_images_dir()
        self._namespace = image_namespace

    def build(self, name: str, *, force: bool = False) -> BuiltTemplate:
        """Builds template ``name`` (its parent first) unless a current tree exists.

        Raises ``TemplateBuildError`` naming what failed and what to do."""
        spec = self._spec(name)
        base_id, start = self._start(spec)
        digest = self._digest(spec, base_id)
        if not force:
            existing = self._find(spec, digest)
            if existing is not None:
                self._on_progress(BuildStep.BUILD, 1.0, f"{name} is current ({digest[:12]})")
                return existing
        return self._run(spec, base_id, start, digest)

    def status(self, name: str) -> BuiltTemplate | None:
        """The current tree of ``name``, or None; never builds or bootstraps."""
        spec = self._spec(name)
        if spec.parent is not None:
            parent = self.status(spec.parent)
            if parent is None:
                return None
            base_id = parent.image_id
        else:
            base_id = self._bootstrap_id(spec)
        return self._find(spec, self._digest(spec, base_id))

    def state(self, name: str) -> tuple[TemplateState, BuiltTemplate | None]:
        current = self.status(name)
        if current is not None:
            return TemplateState.CURRENT, current
        spec = self._spec(name)
        older = sorted(self._dir.glob(f"by-name/{self._repository(spec).replace('/', '_')}_*"))
        return (TemplateState.STALE if older else TemplateState.MISSING), None

    def ensure(self, names: Iterable[str]) -> list[BuiltTemplate]:
        return [self.build(name) for name in dict.fromkeys(names)]

    def labels(self, built: BuiltTemplate) -> dict[str, str]:
        """The labels a built template declared (start command, readiness port)."""
        tree = by_name_dir(self._dir, built.image_ref)
        data = _read_json(tree.with_name(tree.name + ".json"))
        return {str(k): str(v) for k, v in data.get("labels", {}).items()}

    # -- steps ----------------------------------------------------------------------------

    def _spec(self, name: str) -> TemplateSpec:
        spec = SHIPPED_TEMPLATES.get(name)
        if spec is None:
            known = ", ".join(sorted(SHIPPED_TEMPLATES))
            raise TemplateBuildError(f"unknown template {name!r}: shipped templates are {known}")
        return spec

    def _repository(self, spec: TemplateSpec) -> str:
        return f"{self._namespace}/template-{spec.name}"

    def _bootstrap_id(self, spec: TemplateSpec) -> str:
        packages = package_list(self._images_dir / spec.context / "packages.txt")
        return f"debootstrap:{rootfs_digest(SUITE, VARIANT, packages)}"

    def _start(self, spec: TemplateSpec) -> tuple[str, Path]:
        """(id of the starting tree, its directory), bootstrapping or building it first."""
        if spec.parent is not None:
            parent = self.build(spec.parent)
            return parent.image_id, by_name_dir(self._dir, parent.image_ref)
        base_id = self._bootstrap_id(spec)
        tree = self._dir / "bootstrap" / base_id.removeprefix("debootstrap:")
        if not (tree / ".sandgate-complete").is_file():
            packages = package_list(self._images_dir / spec.context / "packages.txt")
            tree.parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=".bootstrap-", dir=tree.parent))
            try:
                bootstrap_tree(
                    scratch, packages=packages, mirror=self._mirror, on_progress=self._on_progress
                )
                (scratch / ".sandgate-complete").write_text(base_id + "\n")
                if tree.exists():
                    remove_tree(tree)
                scratch.rename(tree)
            except BaseException:
                remove_tree(scratch)
                raise
        return base_id, tree

    def _digest(self, spec: TemplateSpec, base_id: str) -> str:
        with _staged(self._images_dir, spec) as context:
            return template_digest(spec.name, context, base_id, {"BASE_IMAGE": base_id})

    def _find(self, spec: TemplateSpec, digest: str) -> BuiltTemplate | None:
        ref = f"{self._repository(spec)}:{digest[:12]}"
        tree = by_name_dir(self._dir, ref)
        meta = _read_json(tree.with_name(tree.name + ".json"))
        if meta.get("labels", {}).get(DIGEST_LABEL) != digest or not tree.is_dir():
            return None
        return BuiltTemplate(spec.name, ref, _NATIVE_PREFIX + digest, digest, meta.get("size", 0))

    def _run(self, spec: TemplateSpec, base_id: str, start: Path, digest: str) -> BuiltTemplate:
        ref = f"{self._repository(spec)}:{digest[:12]}"
        target = by_name_dir(self._dir, ref)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._on_progress(BuildStep.BUILD, 0.0, f"building {ref} (no container engine)")
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _copy_tree(start, scratch)
            scratch.chmod(0o755)  # mkdtemp made it 0700; it is the sandbox's "/"
            with contextlib.suppress(FileNotFoundError):
                (scratch / ".sandgate-complete").unlink()
            with _staged(self._images_dir, spec, for_build=True) as context:
                env, workdir, labels = self._apply(spec, context, scratch, base_id)
            labels.update({TEMPLATE_LABEL: spec.name, DIGEST_LABEL: digest, BASE_LABEL: base_id})
            if target.exists():
                remove_tree(target)
            scratch.rename(target)
        except BaseException:
            remove_tree(scratch)
            raise
        size = _tree_bytes(target)
        _write_json(
            target.with_name(target.name + ".json"),
            {"env": env, "workdir": workdir, "labels": labels, "size": size},
        )
        self._on_progress(BuildStep.BUILD, 1.0, f"built {ref}")
        return BuiltTemplate(spec.name, ref, _NATIVE_PREFIX + digest, digest, size)

    def _apply(
        self, spec: TemplateSpec, context: Path, root: Path, base_id: str
    ) -> tuple[dict[str, str], str, dict[str, str]]:
        dockerfile = context / "Dockerfile"
        steps = parse_dockerfile(dockerfile)
        args: dict[str, str] = {}
        env: dict[str, str] = {"PATH": _DEFAULT_PATH}
        labels: dict[str, str] = {}
        workdir = "/"
        for number, step in enumerate(steps, start=1):
            where = f"{dockerfile}:{step.line}"
            self._on_progress(
                BuildStep.BUILD,
                (number - 1) / len(steps),
                f"Step {number}/{len(steps)} : {step.keyword} {step.text}"[:200],
            )
            variables = {**args, **env}
            if step.keyword == "ARG":
                name, _, default = step.text.partition("=")
                args[name] = base_id if name == "BASE_IMAGE" else default
            elif step.keyword == "ENV":
                env.update(key_values(expand(step.text, variables), where))
            elif step.keyword == "LABEL":
                labels.update(key_values(expand(step.text, variables), where))
            elif step.keyword == "WORKDIR":
                workdir = _resolve(workdir, expand(step.text, variables))
                _inside(root, workdir).mkdir(parents=True, exist_ok=True)
            elif step.keyword == "COPY":
                _copy(context, root, workdir, expand(step.text, variables).split(), where)
            elif step.keyword == "RUN":
                self._run_step(root, step, {**args, **env}, workdir)
            # FROM (the starting tree is already in place) and CMD (the guest is the
            # command of every sandbox) have nothing to do here.
        return env, workdir, labels

    def _run_step(self, root: Path, step: Instruction, env: dict[str, str], workdir: str) -> None:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise TemplateBuildError("bubblewrap not found: apt-get install bubblewrap")
        if os.geteuid() != 0:
            raise TemplateBuildError("engine-less template builds run as root")
        argv = [
            bwrap,
            "--bind", str(root), "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session",
            "--chdir", workdir,
            "--clearenv",
        ]  # fmt: skip
        resolv = Path("/etc/resolv.conf")
        if resolv.exists():
            argv += ["--ro-bind", str(resolv.resolve()), "/etc/resolv.conf"]
        for key, value in {"HOME": "/root", **env}.items():
            argv += ["--setenv", key, value]
        argv += ["/bin/sh", "-c", step.text]
        code, output = run_streaming(
            argv, lambda line: self._on_progress(BuildStep.BUILD, None, line[:200])
        )
        if code != 0:
            raise TemplateBuildError(
                f"RUN at line {step.line} failed (exit {code}); last output:\n{output}"
            )


def _sources_of(context: Path, sources: list[str], where: str) -> Iterator[Path]:
    for source in sources:
        path = (context / source).resolve()
        if not path.is_relative_to(context.resolve()) or not path.exists():
            raise TemplateBuildError(f"{where}: COPY source {source!r} is not in the context")
        yield path


def _copy(context: Path, root: Path, workdir: str, words: list[str], where: str) -> None:
    if len(words) < 2:
        raise TemplateBuildError(f"{where}: COPY needs a source and a destination")
    *sources, destination = words
    dest_path = _resolve(workdir, destination)
    into_dir = destination.endswith("/") or len(sources) > 1
    target = _inside(root, dest_path)
    for path in _sources_of(context, sources, where):
        if path.is_dir():
            shutil.copytree(path, target, symlinks=True, dirs_exist_ok=True)
        elif into_dir:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def _resolve(workdir: str, path: str) -> str:
    return os.path.normpath(path if path.startswith("/") else os.path.join(workdir, path))


def _inside(root: Path, absolute: str) -> Path:
    """``absolute`` (a path in the image) under ``root``, refusing anything that escapes it,
    through ``..`` or through a symlink in the tree."""
    candidate = (root / absolute.lstrip("/")).resolve()
    real_root = root.resolve()
    if candidate != real_root and not candidate.is_relative_to(real_root):
        raise TemplateBuildError(f"path {absolute!r} leaves the image's root")
    return candidate


def _copy_tree(source: Path, target: Path) -> None:
    """Copies an image tree keeping owners, modes, links and hard links (``cp -a``)."""
    result = subprocess.run(
        ["cp", "-a", "--reflink=auto", f"{source}/.", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise TemplateBuildError(f"copying {source} failed: {result.stderr.strip()[:500]}")


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data), mode=0o644)
