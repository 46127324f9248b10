"""``sandgate doctor``: is this machine ready to run sandboxes safely? Each problem comes with
its fix. Exits non-zero when something required is missing, or when the runtime ``serve``
would use is below a patched floor that no exception accepts (an accepted one is shown as
``accepted``, never as ``ok``)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

import typer
from rich.table import Table

from sandgate.cli._common import ConfigOption, console, friendly_errors, load
from sandgate.runtimes.floors import RUNTIME_COMPONENTS, Finding, FloorStatus
from sandgate.runtimes.select import Choice, choose

_MIN_FREE_BYTES = 2 * 1024**3


@dataclass
class Check:
    name: str
    status: str  # "ok" | "warn" | "accepted" | "fail"
    detail: str
    fix: str = ""


def run_checks(config_path: Any = None) -> list[Check]:
    # Imported here, not at the top: every `sandgate` command loads this module to register
    # `doctor`, and the Docker SDK and the template builders cost most of a CLI start.
    import docker.errors

    from sandgate.templates import SHIPPED_TEMPLATES, TemplateBuilder, TemplateBuildError

    cfg = load(config_path)
    checks: list[Check] = []
    try:
        client = docker.from_env()
        info: dict[str, Any] = client.info()
        version: dict[str, Any] = client.version()
    except docker.errors.DockerException as exc:
        engineless = cfg.runtime.kind != "docker"
        checks.append(
            Check(
                "docker engine",
                "warn" if engineless else "fail",
                f"unreachable ({type(exc).__name__})"
                + (
                    "; bwrap runs sandboxes, templates are built without an engine"
                    if engineless
                    else ""
                ),
                "optional: apt-get install docker.io && (systemctl start docker || dockerd &)"
                if engineless
                else "apt-get install docker.io && (systemctl start docker || dockerd &)",
            )
        )
        client = None
        info, version = {}, {}
        if engineless:
            checks.extend(_native_template_checks(cfg))
    if client is not None:
        checks.append(Check("docker engine", "ok", f"Docker {version.get('Version')}"))
        cgroup = str(info.get("CgroupVersion", "?"))
        checks.append(
            Check(
                "cgroup version",
                "ok",
                f"v{cgroup}",
                "" if cgroup == "2" else "v1 works; v2 gives better memory and pids accounting",
            )
        )
        options = " ".join(info.get("SecurityOptions", []))
        checks.append(
            Check(
                "seccomp",
                "ok" if "seccomp" in options else "fail",
                "enabled" if "seccomp" in options else "not supported by this engine",
                "" if "seccomp" in options else "install a Docker build with seccomp support",
            )
        )
        checks.extend(_identity_checks(info))
        try:
            builder = TemplateBuilder(client, source=cfg.templates.source)
            for name in SHIPPED_TEMPLATES:
                built = builder.status(name)
                checks.append(
                    Check(
                        f"template {name}",
                        "ok" if built else "fail",
                        built.image_ref if built else "not built",
                        "" if built else f"sandgate templates build {name}",
                    )
                )
        except TemplateBuildError as exc:
            checks.append(Check("templates", "fail", str(exc), "see the message"))
        client.close()
    home = cfg.home_dir
    home.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(home).free
    checks.append(
        Check(
            "disk",
            "ok" if free >= _MIN_FREE_BYTES else "fail",
            f"{free / 1024**3:.1f} GiB free in {home}",
            "" if free >= _MIN_FREE_BYTES else "free space or set SANDGATE_HOME elsewhere",
        )
    )
    checks.extend(runtime_checks(cfg))
    checks.append(audit_check(cfg))
    return checks


def audit_check(cfg: Any) -> Check:
    """The audit log verified whole: chain, anchored copies in the store, signed
    checkpoints. Damage fails (tool calls are refused while it lasts) and names the first
    bad record."""
    from sandgate.audit import build_audit
    from sandgate.cli._common import open_store
    from sandgate.errors import SandgateError
    from sandgate.secrets import SecretStore

    try:
        log = build_audit(cfg, open_store(cfg), SecretStore(cfg.secrets))
        result = log.verify()
    except SandgateError as exc:
        return Check("audit log", "fail", exc.message, "see the message")
    if result.ok:
        detail = f"intact: {result.checked} records ({log.path})"
        if result.notes:
            detail += "; " + "; ".join(result.notes)
        return Check("audit log", "ok", detail)
    where = f" (first bad record: {result.first_bad})" if result.first_bad else ""
    return Check(
        "audit log",
        "fail",
        f"tampered: {result.problem}{where}; tool calls are refused",
        "keep a copy for investigation, then `sandgate audit recover --yes`",
    )


def _identity_checks(info: dict[str, Any]) -> list[Check]:
    """Docker sandboxes get a user namespace and uid range of their own through Sandgate's
    OCI runtime shim (``runtimes/oci_shim.py``), over an idmapped copy-on-write root."""
    import json

    from sandgate.runtimes._bwrap_host import check_layers
    from sandgate.runtimes._oci_install import RUNTIME_NAME, daemon_snippet

    entry = (info.get("Runtimes") or {}).get(RUNTIME_NAME) or {}
    expected = daemon_snippet()["runtimes"][RUNTIME_NAME]["path"]
    registered = isinstance(entry, dict) and entry.get("path") == expected
    checks = [
        Check(
            "docker: per-sandbox user namespaces",
            "ok" if registered else "warn",
            f"runtime '{RUNTIME_NAME}' -> {expected}"
            if registered
            else f"the engine has no '{RUNTIME_NAME}' runtime yet",
            ""
            if registered
            else "`sandgate serve` (as root, local engine) registers it; or add to "
            f"daemon.json: {json.dumps(daemon_snippet())}",
        )
    ]
    layers = check_layers()
    checks.append(
        Check(
            "docker: " + layers.feature,
            "ok" if layers.ok else "fail",
            layers.detail,
            layers.fix,
        )
    )
    return checks


def _native_template_checks(cfg: Any) -> list[Check]:
    from sandgate.templates import SHIPPED_TEMPLATES, NativeTemplateBuilder, TemplateBuildError

    rootfs_dir = cfg.rootfs_dir
    builder = NativeTemplateBuilder(rootfs_dir, mirror=cfg.templates.mirror)
    checks = []
    for name in SHIPPED_TEMPLATES:
        try:
            built = builder.status(name)
        except TemplateBuildError as exc:
            checks.append(Check(f"template {name}", "fail", str(exc), "see the message"))
            continue
        checks.append(
            Check(
                f"template {name}",
                "ok" if built else "warn",
                f"{built.image_ref} (no engine)" if built else "not built",
                ""
                if built
                else f"serve builds it on first run, or: sandgate templates build {name} "
                "--engine native",
            )
        )
    return checks


def runtime_checks(cfg: Any) -> list[Check]:
    """Which runtime ``serve`` would use and why; each runtime floor; for bwrap, each
    isolation feature it needs. A missing bwrap feature fails only when bwrap is (or would
    have to be) the runtime; a floor below fails only when the runtime ``serve`` would use
    depends on the component."""
    choice = choose(cfg)
    usable = choice.kind is not None and choice.refusal is None
    checks = [
        Check(
            "runtime",
            "ok" if usable else "fail",
            f"{choice.kind or 'none'}: {choice.reason}",
            "" if usable else "see the failing checks below",
        )
    ]
    checks += floor_checks(choice)
    requirements = choice.bwrap
    if not requirements:
        from sandgate.runtimes.bwrap import check_host

        requirements = tuple(check_host())
    needed = choice.kind == "bwrap" or cfg.runtime.kind == "bwrap" or choice.kind is None
    for req in requirements:
        status = "ok" if req.ok else ("fail" if needed else "warn")
        checks.append(Check(f"bwrap: {req.feature}", status, req.detail, req.fix))
    return checks


def floor_checks(choice: Choice) -> list[Check]:
    """One row per component and floor: what was found, what is required, the CVEs."""
    needed = RUNTIME_COMPONENTS.get(choice.kind or "", ())
    checks = [
        _floor_check(finding, finding.component in needed) for finding in choice.floors.findings
    ]
    for exception in choice.floors.expired:
        checks.append(
            Check(
                f"floor exception {exception.component}",
                "warn",
                f"{', '.join(exception.cves)}: expired on {exception.expires}, no longer applied",
                "upgrade, or renew the exception in runtime.accept_below_floor",
            )
        )
    for exception, cve in choice.floors.unused:
        checks.append(
            Check(
                f"floor exception {exception.component}",
                "warn",
                f"{cve}: nothing this runtime uses here is below a floor for it",
                "remove it from runtime.accept_below_floor",
            )
        )
    return checks


def _floor_check(finding: Finding, needed: bool) -> Check:
    cves = ", ".join(finding.floor.cves) or finding.floor.id
    name = f"floor {finding.component}: {cves}"
    detail = (
        f"{finding.found} ({finding.fact.source}); needs {finding.floor.required}; {finding.detail}"
    )
    if finding.status in (FloorStatus.OK, FloorStatus.NOT_AFFECTED):
        return Check(name, "ok", detail)
    if finding.status is FloorStatus.ADVISORY:
        return Check(name, "warn", detail, f"not enforced; {finding.fix()}")
    if finding.status is FloorStatus.ACCEPTED:
        why = "; ".join(
            e.reason + (f" (until {e.expires})" if e.expires else "") for e in finding.accepted_by
        )
        return Check(name, "accepted", detail, f"accepted risk: {why}")
    if not needed:
        return Check(name, "warn", detail, f"serve does not use it; {finding.fix()}")
    return Check(name, "fail", detail, finding.fix())


@friendly_errors
def doctor(config: ConfigOption = None) -> None:
    """Checks the engine, runtime versions against patched floors, cgroups, disk and
    templates; every problem says how to fix it."""
    checks = run_checks(config)
    table = Table("check", "status", "detail", "fix")
    colours = {"ok": "green", "warn": "yellow", "accepted": "magenta", "fail": "red"}
    for check in checks:
        table.add_row(
            check.name, f"[{colours[check.status]}]{check.status}[/]", check.detail, check.fix
        )
    console.print(table)
    if any(check.status == "fail" for check in checks):
        raise typer.Exit(1)
