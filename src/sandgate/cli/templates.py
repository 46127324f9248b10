"""``sandgate templates``: build and inspect the shipped templates."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table

from sandgate.cli._common import load
from sandgate.templates._progress import BuildStep, ProgressCallback, ignore_progress
from sandgate.templates._rootfs import DEFAULT_MIRROR
from sandgate.templates._sources import Source
from sandgate.templates._spec import SHIPPED_TEMPLATES
from sandgate.templates.errors import TemplateBuildError

if TYPE_CHECKING:
    from sandgate.templates import NativeTemplateBuilder, TemplateBuilder

__all__ = ["templates_app"]

templates_app = typer.Typer(
    help="Build and inspect the shipped sandbox templates (base, ...).",
    no_args_is_help=True,
)

_console = Console()
_errors = Console(stderr=True)

SourceOption = Annotated[
    Source,
    typer.Option(
        "--source",
        help="Where the root filesystem comes from: auto (local image, else pull, else "
        "debootstrap), registry (pull debian:bookworm-slim) or debootstrap (offline).",
        case_sensitive=False,
    ),
]
MirrorOption = Annotated[
    str, typer.Option("--mirror", help="Debian mirror for debootstrap.", metavar="URL")
]


class Engine(enum.StrEnum):
    AUTO = "auto"
    DOCKER = "docker"
    NATIVE = "native"


EngineOption = Annotated[
    Engine,
    typer.Option(
        "--engine",
        help="docker (images) or native (root file systems for the bwrap runtime, built "
        "without any container engine); auto: docker when its engine answers, else native.",
        case_sensitive=False,
    ),
]


def _builder(
    engine: Engine,
    source: Source,
    mirror: str,
    on_progress: ProgressCallback = ignore_progress,
) -> TemplateBuilder | NativeTemplateBuilder:
    # Imported here: every `sandgate` command loads this module to register its commands.
    from sandgate.templates import NativeTemplateBuilder, TemplateBuilder

    if engine is Engine.AUTO:
        engine = Engine.DOCKER if _docker_answers() else Engine.NATIVE
    if engine is Engine.DOCKER:
        return TemplateBuilder(
            _docker_client(), source=source, mirror=mirror, on_progress=on_progress
        )
    config = load(None)
    rootfs_dir = config.rootfs_dir
    return NativeTemplateBuilder(rootfs_dir, mirror=mirror, on_progress=on_progress)


def _docker_answers() -> bool:
    import docker
    import docker.errors

    try:
        docker.from_env().ping()
    except docker.errors.DockerException:
        return False
    return True


@templates_app.command("list")
def list_templates(source: SourceOption = Source.AUTO, engine: EngineOption = Engine.AUTO) -> None:
    """Show each shipped template: built?, image, digest, size."""
    from sandgate.templates import TemplateState

    builder = _builder(engine, source, DEFAULT_MIRROR)
    table = Table("name", "built", "image", "digest", "size")
    for name in SHIPPED_TEMPLATES:
        try:
            state, built = builder.state(name)
        except TemplateBuildError as exc:
            _fail(exc)
        style = {TemplateState.CURRENT: "green", TemplateState.STALE: "yellow"}.get(state, "red")
        table.add_row(
            name,
            f"[{style}]{state}[/]",
            built.image_ref if built else "-",
            built.digest[:12] if built else "-",
            _size(built.size_bytes) if built else "-",
        )
    _console.print(table)


@templates_app.command("build")
def build_templates(
    name: Annotated[
        str | None, typer.Argument(help="Template to build, e.g. base.", metavar="NAME")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Build every shipped template.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even when the image is current.")
    ] = False,
    source: SourceOption = Source.AUTO,
    mirror: MirrorOption = DEFAULT_MIRROR,
    engine: EngineOption = Engine.AUTO,
) -> None:
    """Build a template (or --all); reuses images whose inputs have not changed."""
    if (name is None) == (not all_):
        _errors.print("[red]error:[/] give a template NAME or --all (not both)")
        raise typer.Exit(2)
    names = list(SHIPPED_TEMPLATES) if all_ else [name or ""]
    with _ProgressView() as view:
        try:
            builder = _builder(engine, source, mirror, view.update)
            results = [builder.build(n, force=force) for n in names]
        except TemplateBuildError as exc:
            view.stop()
            _fail(exc)
    for built in results:
        _console.print(
            f"[green]✓[/] {built.name}: {built.image_ref} "
            f"({built.image_id[7:19]}, {_size(built.size_bytes)})"
        )


class _ProgressView:
    """Renders ``ProgressCallback`` events: one bar per build step."""

    def __init__(self) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[step]}", table_column=Column(min_width=11)),
            BarColumn(bar_width=24),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn(
                "{task.description}",
                table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"),
            ),
            console=_errors,
            transient=False,
        )
        self._tasks: dict[BuildStep, TaskID] = {}

    def __enter__(self) -> _ProgressView:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._progress.stop()

    def update(self, step: BuildStep, fraction: float | None, message: str) -> None:
        description = escape(message.splitlines()[0][:70]) if message else ""
        task = self._tasks.get(step)
        if task is None:
            task = self._progress.add_task(description, total=None, step=step.value)
            self._tasks[step] = task
        if fraction is None:
            self._progress.update(task, description=description)
        else:
            self._progress.update(task, total=1.0, completed=fraction, description=description)


def _docker_client() -> Any:
    import docker
    import docker.errors

    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        _fail(TemplateBuildError(f"Docker engine unreachable ({exc}): start dockerd"))


def _fail(exc: TemplateBuildError) -> NoReturn:
    _errors.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
    raise typer.Exit(1)


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 1_000_000:.0f} MB"
