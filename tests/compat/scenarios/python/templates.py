"""Template builds through the SDK: every builder step kind, the start/ready commands, the layer
cache on a rebuild with one changed step, tags, aliases, background builds and failures.

Argument: the template name (shared by every client of one server, so later clients' builds
are answered from the layer cache).

``steps NAME IMAGE`` builds a second, smaller template with the steps the first leaves out:
``from_dockerfile`` (the SDK converts the Dockerfile; its ``FROM`` of the locally tagged
``IMAGE`` is the ``from_image`` wire request), ``npm_install`` of a local tarball (no registry),
``skip_cache`` (a forced step reruns on a rebuild while the steps before it come from the
cache) and ``set_ready_cmd`` (create returns after the ready command ran).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import time
import zipfile
from typing import Any

from _common import attempt, command_result, run
from e2b import Sandbox, Template, wait_for_port

#: Makes the marker step's cache key unique to this run (see ``template``).
RUN_NONCE = os.urandom(6).hex()

PROBE = (
    "whoami; pwd; echo $SCENARIO_ENV; cat /tmp/whoami-build /etc/scenario-root; "
    "stat -c '%U %a' /opt/files/data.txt; readlink /opt/files/link.txt; cat /opt/single.txt; "
    "command -v sgtree; python3 -c 'import sgprobe; print(sgprobe.VALUE)'; "
    "test -d /home/user/clone/.git && echo cloned; test -d /opt/made && echo made; "
    "readlink /opt/single-link; test -e /opt/gone || echo gone; cat /opt/new; "
    "curl -s localhost:8123/marker.txt"
)


#: A local apt repository with one package of our own (``sgtree``), in place of Debian's
#: sources: ``apt_install`` then reaches no network.
LOCAL_APT_REPO = (
    "set -e; d=/opt/sgrepo; mkdir -p $d/pkg/DEBIAN $d/pkg/usr/bin; "
    "printf 'Package: sgtree\\nVersion: 1.0\\nArchitecture: all\\n"
    "Maintainer: s <s@g>\\nDescription: apt_install probe\\n' > $d/pkg/DEBIAN/control; "
    "printf '#!/bin/sh\\necho apt-ok\\n' > $d/pkg/usr/bin/sgtree; "
    "chmod 755 $d/pkg/usr/bin/sgtree; dpkg-deb -b $d/pkg $d/sgtree.deb >/dev/null; "
    "cd $d; { dpkg-deb -f sgtree.deb; echo Filename: ./sgtree.deb; "
    "echo Size: $(stat -c %s sgtree.deb); "
    "echo SHA256: $(sha256sum sgtree.deb | cut -d' ' -f1); } > Packages; "
    "mkdir -p $d/off; "
    "mv /etc/apt/sources.list.d/* /etc/apt/sources.list $d/off/ 2>/dev/null || true; "
    "echo 'deb [trusted=yes] file:/opt/sgrepo ./' > /etc/apt/sources.list.d/sgrepo.list"
)


def make_context() -> str:
    root = tempfile.mkdtemp(prefix="sg-tpl-")
    files = os.path.join(root, "files")
    os.makedirs(files)
    with open(os.path.join(files, "data.txt"), "w") as f:
        f.write("data-ok\n")
    os.symlink("data.txt", os.path.join(files, "link.txt"))
    with open(os.path.join(root, "single.txt"), "w") as f:
        f.write("single-ok\n")
    write_wheel(os.path.join(files, "sgprobe-0.1-py3-none-any.whl"))
    return root


def write_wheel(path: str) -> None:
    files = {
        "sgprobe/__init__.py": b"VALUE = 'wheel-ok'\n",
        "sgprobe-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sgprobe\nVersion: 0.1\n",
        "sgprobe-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: sg\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append("sgprobe-0.1.dist-info/RECORD,,")
        wheel.writestr(
            zipfile.ZipInfo("sgprobe-0.1.dist-info/RECORD", (2020, 1, 1, 0, 0, 0)),
            "\n".join(record) + "\n",
        )


def template(context: str, version: str) -> Any:
    return (
        Template(file_context_path=context)
        .from_template("base")
        .set_envs({"SCENARIO_ENV": "env-ok", "PIP_BREAK_SYSTEM_PACKAGES": "1"})
        .run_cmd("echo step-as-$(whoami) > /tmp/whoami-build")
        .run_cmd("echo root-ok > /etc/scenario-root", user="root")
        .copy("files", "/opt/files", user="user", mode=0o750)
        .copy("single.txt", "/opt/single.txt")
        .run_cmd(LOCAL_APT_REPO, user="root")
        .apt_install("sgtree")
        .pip_install("/opt/files/sgprobe-0.1-py3-none-any.whl")
        .run_cmd(
            "git init -q /tmp/src && git -C /tmp/src -c user.email=s@g -c user.name=s "
            "commit -q --allow-empty -m init"
        )
        .git_clone("/tmp/src", "/home/user/clone")
        .make_dir("/opt/made", user="root")
        .make_symlink("/opt/single.txt", "/opt/single-link", user="root")
        .run_cmd("touch /opt/gone && echo renamed-ok > /opt/old", user="root")
        .remove("/opt/gone", user="root")
        .rename("/opt/old", "/opt/new", user="root")
        .run_cmd(
            # The comment makes this step's cache key unique to this run: the layer cache is the
            # engine's, shared by every server of a test session.
            f"mkdir -p /srv/www && echo {version} > /srv/www/marker.txt # {RUN_NONCE}",
            user="root",
        )
        .set_user("builder")
        .set_workdir("/opt/work")
        .set_start_cmd("cd /srv/www && python3 -m http.server 8123", wait_for_port(8123))
    )


def build(tpl: Any, name: str, **kwargs: Any) -> tuple[Any, list[str]]:
    logs: list[str] = []
    info = Template.build(tpl, name, on_build_logs=lambda e: logs.append(e.message), **kwargs)
    return info, logs


def scenario(args: list[str]) -> dict[str, Any]:
    name = args[0]
    out: dict[str, Any] = {"name": name}
    context = make_context()
    started = time.monotonic()
    info, logs = build(template(context, "v1"), name)
    out["build_seconds"] = time.monotonic() - started
    out["template_id"] = info.template_id
    out["build_id"] = info.build_id
    out["logs_tail"] = logs[-40:]

    sbx = Sandbox.create(name)
    try:
        out["probe"] = command_result(sbx.commands.run(PROBE))
        out["root_user"] = command_result(sbx.commands.run("whoami", user="root"))
    finally:
        sbx.kill()

    _, logs2 = build(template(context, "v2"), name)
    out["rebuild_cached"] = [line for line in logs2 if line.startswith("CACHED")]
    out["rebuild_ran"] = [line for line in logs2 if line.startswith("[") and "/" in line]
    by_tag = Sandbox.create(f"{name}:default")
    try:
        out["marker_after_rebuild"] = command_result(by_tag.commands.run("cat /srv/www/marker.txt"))
    finally:
        by_tag.kill()

    out["exists"] = Template.exists(name)
    out["exists_base"] = Template.exists("base")
    out["exists_missing"] = Template.exists(name + "-missing")
    out["assign"] = attempt(lambda: vars(Template.assign_tags(f"{name}:default", ["stable"])))
    out["tags"] = sorted(t.tag for t in Template.get_tags(info.template_id))
    tagged = Sandbox.create(f"{name}:stable")
    try:
        out["tagged_marker"] = command_result(tagged.commands.run("cat /srv/www/marker.txt"))
    finally:
        tagged.kill()
    out["remove_tags"] = attempt(lambda: Template.remove_tags(name, ["stable"]))
    out["tags_after_remove"] = sorted(t.tag for t in Template.get_tags(info.template_id))

    background = Template.build_in_background(
        Template().from_template(name).run_cmd("echo background > /tmp/bg"), name + "-bg"
    )
    statuses = []
    for _ in range(600):
        status = Template.get_build_status(background)
        statuses.append(status.status.value)
        if status.status.value in ("ready", "error"):
            break
        time.sleep(0.2)
    out["background_final"] = statuses[-1]

    failing = Template().from_template("base").run_cmd("echo boom-tail-line; exit 3")
    out["failed"] = attempt(lambda: build(failing, name + "-fail"))
    missing_image = Template().from_image("sandgate-missing.invalid/nothing:1")
    out["missing_image"] = attempt(lambda: build(missing_image, name + "-noimage"))
    return out


#: The second template's Dockerfile: ``{image}`` is a locally tagged image (no registry) that
#: already has Node.js and npm, so the build reaches no network.
DOCKERFILE = """\
FROM {image}
ENV DF_VAR=df-ok npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
RUN node --version > /opt/node-version && npm --version > /opt/npm-version
WORKDIR /opt/df
COPY sgnpm-1.0.0.tgz /opt/df/
RUN echo dockerfile-ok > /opt/df/marker
"""

STEPS_PROBE = (
    "whoami; pwd; echo $DF_VAR; cat /opt/df/marker; sgnpm; "
    "test -f /tmp/ready-ran && echo ready-ran; cat /opt/df/forced"
)


def write_npm_tarball(path: str) -> None:
    """A package with a ``bin``, packed as ``npm pack`` would (everything under ``package/``)."""
    files = {
        "package/package.json": (
            b'{"name": "sgnpm", "version": "1.0.0", "bin": {"sgnpm": "bin.js"}}\n',
            0o644,
        ),
        "package/bin.js": (b"#!/usr/bin/env node\nconsole.log('npm-ok');\n", 0o755),
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1577836800
            tar.addfile(info, io.BytesIO(data))


def steps_template(context: str, image: str) -> Any:
    return (
        Template(file_context_path=context)
        .from_dockerfile(DOCKERFILE.format(image=image))
        .npm_install("/opt/df/sgnpm-1.0.0.tgz", g=True)
        .skip_cache()
        .run_cmd("cat /proc/sys/kernel/random/uuid > /opt/df/forced", user="root")
        .set_ready_cmd("touch /tmp/ready-ran")
    )


def probe(name: str) -> dict[str, Any]:
    sbx = Sandbox.create(name)
    try:
        return command_result(sbx.commands.run(STEPS_PROBE))
    finally:
        sbx.kill()


def steps_scenario(args: list[str]) -> dict[str, Any]:
    name, image = args
    context = tempfile.mkdtemp(prefix="sg-tpl-steps-")
    write_npm_tarball(os.path.join(context, "sgnpm-1.0.0.tgz"))
    tpl = steps_template(context, image)
    out: dict[str, Any] = {"name": name}
    _, out["logs"] = build(tpl, name)
    out["probe"] = probe(name)
    _, logs = build(tpl, name)
    out["rebuild_cached"] = [line for line in logs if line.startswith("CACHED")]
    out["rebuild_ran"] = [line for line in logs if line.startswith("[") and "/" in line]
    out["probe_after_rebuild"] = probe(name)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["steps"]:
        del sys.argv[1]
        run(steps_scenario)
    else:
        run(scenario)
