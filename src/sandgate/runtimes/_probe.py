"""What the host runs: kernel, Docker engine, containerd, runc and bubblewrap versions.

Facts only, no judgement (``floors.py`` judges). Each fact says where its version came from,
because the same component can be reported twice and differently (the engine's idea of its
runc, and the runc binary Sandgate's Docker sandboxes actually execute). A distribution build
(``1.1.5+ds1-1+deb12u1``) is recorded only from evidence: the version a binary or the engine
reports in Debian's form, or the package that owns the binary (``dpkg-query``), checked
against the reported upstream version.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandgate.runtimes._versions import parse_version

__all__ = [
    "AUTHZ_PLUGINS",
    "ComponentFact",
    "HostFacts",
    "kernel_fact",
    "package_build",
    "probe_host",
]

#: Condition: the Docker engine runs authorization plugins (some Docker floors need it).
AUTHZ_PLUGINS = "docker_authz_plugins"
_TIMEOUT_S = 10


@dataclass(frozen=True)
class ComponentFact:
    """One component's version as one source reports it.

    ``version`` is the upstream version as reported (``""`` when the source reported none);
    ``build`` the distribution package version when known; ``binary`` a local file whose
    owning package may be looked up when the build matters (``package_build``).
    """

    component: str
    source: str
    version: str
    build: str | None = None
    binary: str | None = None


@dataclass(frozen=True)
class HostFacts:
    """Every component probed on this host, and the conditions some floors depend on."""

    components: tuple[ComponentFact, ...]
    conditions: frozenset[str] = field(default_factory=frozenset)


def probe_host(*, docker_base_url: str | None, bwrap: bool, runc_path: str = "runc") -> HostFacts:
    """Probes the kernel always, the Docker engine (its own version, containerd, runc, and the
    local runc binary at ``runc_path``) when ``docker_base_url`` is not None (``""`` = the
    environment's engine), and bubblewrap when ``bwrap``. A component that does not answer
    yields no fact; one that answers without a readable version yields ``version=""``."""
    facts = [_kernel_from_host()]
    conditions: set[str] = set()
    if docker_base_url is not None:
        engine, engine_conditions = _docker_facts(docker_base_url, runc_path)
        facts += engine
        conditions |= engine_conditions
    if bwrap:
        facts += _bwrap_facts()
    return HostFacts(tuple(facts), frozenset(conditions))


def kernel_fact(release: str, uname_version: str, signature: str | None) -> ComponentFact:
    """The kernel's upstream base, from what the kernel says about itself.

    Ubuntu kernels (``5.15.0-105-generic``) name their upstream base in
    ``/proc/version_signature`` (``Ubuntu 5.15.0-105.115-generic 5.15.148``); Debian's
    (``6.1.0-18-amd64``) put their package version in ``uname -v`` (``... Debian 6.1.76-1
    (2024-02-01)``). Otherwise the release's leading numbers are the version. The release is
    the build, so a kernel can be named in the allow-list exactly.
    """
    if signature:
        parts = signature.split()
        if len(parts) >= 3 and parse_version(parts[-1]) is not None:
            return ComponentFact(
                "kernel", f"kernel {release} (Ubuntu, based on {parts[-1]})", parts[-1], release
            )
    debian = re.search(r"\bDebian (\d+\.\d+(?:\.\d+)?-[^\s)]+)", uname_version)
    if debian is not None:
        package = debian.group(1)
        return ComponentFact(
            "kernel", f"kernel {release} (Debian package {package})", package, release
        )
    return ComponentFact("kernel", f"kernel {release}", release, release)


@functools.cache
def package_build(binary: str) -> str | None:
    """The version of the dpkg package that owns ``binary`` (``None`` without dpkg, or when no
    package owns it). Asked only when a build can change a verdict: it takes ~0.2 s."""
    query = shutil.which("dpkg-query")
    if query is None:
        return None
    candidates = [binary, os.path.realpath(binary)]
    if binary.startswith("/usr/"):
        candidates.append(binary[len("/usr") :])  # merged /usr: dpkg may list /sbin/runc
    for path in dict.fromkeys(candidates):
        owner = _run([query, "-S", path])
        line = owner.splitlines()[0] if owner else ""
        if ": " not in line or line.startswith("diversion"):
            continue
        package = line.split(": ", 1)[0].split(",")[0].strip()
        version = _run([query, "-W", "-f=${Version}", package]).strip()
        if version:
            return version
    return None


# -- kernel ---------------------------------------------------------------------------------


def _kernel_from_host() -> ComponentFact:
    uname = os.uname()
    try:
        signature: str | None = Path("/proc/version_signature").read_text().strip()
    except OSError:
        signature = None
    return kernel_fact(uname.release, uname.version, signature)


# -- Docker engine, containerd, runc ------------------------------------------------------------


def _docker_facts(base_url: str, runc_path: str) -> tuple[list[ComponentFact], set[str]]:
    import docker  # here: a bwrap-only process and the CLI's start never load the SDK
    import docker.errors
    import requests.exceptions

    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        try:
            version: dict[str, Any] = client.version()
            info: dict[str, Any] = client.info()
        finally:
            client.close()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return [], set()
    components = {
        str(c.get("Name", "")).lower(): c
        for c in version.get("Components") or []
        if isinstance(c, dict)
    }
    local = _engine_is_local(base_url)
    dockerd = shutil.which("dockerd") if local else None
    facts = [
        ComponentFact(
            "docker", "the Docker engine", str(version.get("Version") or ""), binary=dockerd
        ),
        _engine_component(components, "containerd"),
    ]
    engine_runc = _engine_component(components, "runc")
    binary_runc = _runc_binary(runc_path) if local else None
    if binary_runc is None:
        facts.append(engine_runc)
    elif (binary_runc.version, binary_runc.build) == (engine_runc.version, engine_runc.build):
        facts.append(
            ComponentFact(
                "runc",
                f"{binary_runc.source}; the Docker engine reports the same",
                binary_runc.version,
                binary_runc.build,
                binary_runc.binary,
            )
        )
    else:
        facts += [engine_runc, binary_runc]
    plugins = (info.get("Plugins") or {}).get("Authorization") or []
    return facts, ({AUTHZ_PLUGINS} if plugins else set())


def _engine_component(components: dict[str, Any], name: str) -> ComponentFact:
    found = components.get(name) or {}
    version = str(found.get("Version") or "")
    commit = str((found.get("Details") or {}).get("GitCommit") or "")
    return ComponentFact(
        name, f"the Docker engine's {name}", version, _debian_form(version, commit)
    )


def _runc_binary(runc_path: str) -> ComponentFact | None:
    path = runc_path if os.sep in runc_path else shutil.which(runc_path)
    if path is None or not os.access(path, os.X_OK):
        return None
    out = _run([path, "--version"])
    version = re.search(r"^runc version (\S+)", out, re.M)
    commit = re.search(r"^commit: (\S+)", out, re.M)
    text = version.group(1) if version else ""
    build = _debian_form(text, commit.group(1) if commit else "")
    return ComponentFact("runc", f"runc at {path}", text, build, path)


def _debian_form(version: str, commit: str) -> str | None:
    """Debian's packages report their package version as the commit (``1.1.5+ds1`` →
    ``1.1.5+ds1-1+deb12u1``); upstream builds report a git hash or ``v1.2.8-0-g…``."""
    if version and commit.startswith(version + "-"):
        return commit
    return None


def _engine_is_local(base_url: str) -> bool:
    address = base_url or os.environ.get("DOCKER_HOST", "")
    return not address or address.startswith("unix://")


# -- bubblewrap -----------------------------------------------------------------------------------


def _bwrap_facts() -> list[ComponentFact]:
    path = shutil.which("bwrap")
    if path is None:
        return []
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", _run([path, "--version"]))
    return [
        ComponentFact(
            "bubblewrap", f"bubblewrap at {path}", match.group(1) if match else "", binary=path
        )
    ]


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
