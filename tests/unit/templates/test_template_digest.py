"""Content digests decide whether a template image is current."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

import sandgate.templates as templates
from sandgate.templates._digest import (
    context_digest,
    package_list,
    rootfs_digest,
    template_digest,
)
from sandgate.templates._rootfs import _DebootstrapTracker
from sandgate.templates._spec import default_images_dir


@pytest.fixture
def context(tmp_path: Path) -> Path:
    directory = tmp_path / "ctx"
    directory.mkdir()
    (directory / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    (directory / "files").mkdir()
    (directory / "files" / "hello.sh").write_text("echo hello\n")
    return directory


def test_context_digest_is_stable_and_ignores_mtimes(context: Path, tmp_path: Path) -> None:
    before = context_digest(context)
    os.utime(context / "Dockerfile", (0, 0))
    copy = shutil.copytree(context, tmp_path / "copy")
    assert context_digest(context) == before
    assert context_digest(copy) == before
    assert len(before) == 64


@pytest.mark.parametrize(
    "change",
    [
        lambda d: (d / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN true\n"),
        lambda d: (d / "files" / "hello.sh").chmod(0o755),
        lambda d: (d / "files" / "hello.sh").rename(d / "files" / "hi.sh"),
        lambda d: (d / "files" / "new.txt").write_text(""),
        lambda d: (d / "empty").mkdir(),
        lambda d: (d / "link").symlink_to("files/hello.sh"),
    ],
    ids=["content", "exec-bit", "rename", "new-file", "new-dir", "symlink"],
)
def test_context_digest_changes_with_any_file_change(context: Path, change: object) -> None:
    before = context_digest(context)
    change(context)  # type: ignore[operator]
    assert context_digest(context) != before


def test_context_digest_of_a_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="build context not found"):
        context_digest(tmp_path / "nope")


def test_template_digest_depends_on_name_base_and_args(context: Path) -> None:
    reference = template_digest("base", context, "sha256:aaa", {"BASE_IMAGE": "sha256:aaa"})
    assert template_digest("base", context, "sha256:aaa", {"BASE_IMAGE": "sha256:aaa"}) == (
        reference
    )
    assert template_digest("other", context, "sha256:aaa", {"BASE_IMAGE": "sha256:aaa"}) != (
        reference
    )
    assert template_digest("base", context, "sha256:bbb", {"BASE_IMAGE": "sha256:aaa"}) != (
        reference
    )
    assert template_digest("base", context, "sha256:aaa", {"BASE_IMAGE": "sha256:bbb"}) != (
        reference
    )


def test_rootfs_digest_ignores_package_order_and_duplicates() -> None:
    reference = rootfs_digest("bookworm", "minbase", ["bash", "curl"])
    assert rootfs_digest("bookworm", "minbase", ["curl", "bash", "curl"]) == reference
    assert rootfs_digest("bookworm", "minbase", ["bash", "curl", "git"]) != reference
    assert rootfs_digest("trixie", "minbase", ["bash", "curl"]) != reference


def test_package_list_skips_comments_and_blanks(tmp_path: Path) -> None:
    path = tmp_path / "packages.txt"
    path.write_text("# header\nbash\n\n  curl  # the client\n#git\n")
    assert package_list(path) == ["bash", "curl"]


def test_base_packages_cover_what_the_template_promises() -> None:
    packages = set(package_list(default_images_dir() / "base" / "packages.txt"))
    assert {"bash", "python3", "git", "curl", "ca-certificates", "procps", "sudo"} <= packages


def test_base_dockerfile_takes_the_starting_image_as_a_build_arg() -> None:
    lines = (default_images_dir() / "base" / "Dockerfile").read_text().splitlines()
    instructions = [line for line in lines if line and not line.startswith(("#", " "))]
    assert instructions[0].startswith("ARG BASE_IMAGE")
    assert instructions[1] == "FROM ${BASE_IMAGE}"


def test_every_shipped_template_has_a_context_and_a_known_parent() -> None:
    assert "base" in templates.SHIPPED_TEMPLATES
    for name, spec in templates.SHIPPED_TEMPLATES.items():
        assert spec.name == name
        assert (default_images_dir() / spec.context / "Dockerfile").is_file()
        assert spec.parent is None or spec.parent in templates.SHIPPED_TEMPLATES


def test_exported_members_exist() -> None:
    for name in templates.__all__:
        assert hasattr(templates, name), name
    # Submodules appear as attributes once anything imports them (which depends on the tests
    # that ran before in this process), and names load lazily: only the names the package
    # itself defines count, beside its typing helpers.
    public = {
        n
        for n, value in vars(templates).items()
        if not n.startswith("_") and not isinstance(value, ModuleType)
    }
    assert public - set(templates.__all__) <= {"annotations", "TYPE_CHECKING", "Any"}


def test_debootstrap_progress_rises_steadily_to_nearly_done() -> None:
    """Counts as in a real bookworm minbase run with our includes."""
    lines = [f"I: Retrieving pkg{i} 1.0" for i in range(138)]
    lines += ["I: Checking component main", "I: Installing core packages..."]
    for verb, count in (("Extracting", 88), ("Unpacking", 133), ("Configuring", 136)):
        lines += [f"I: {verb} pkg{i}..." for i in range(count)]
    tracker = _DebootstrapTracker()
    fractions = [tracker.feed(line) for line in lines]
    assert fractions == sorted(fractions)
    assert 0.35 <= fractions[137] <= 0.4
    assert 0.9 <= fractions[-1] < 1.0
