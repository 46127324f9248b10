"""Workflow definitions loaded from ``workflows.paths``: one workflow per ``*.yaml``/``*.yml``
file, and a broken file is an error naming the file (and the step) instead of a half-loaded set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgate.errors import ConfigError
from sandgate.workflows.service import load_files

FETCH = """
name: {name}
steps:
  - {{id: fetch, kind: tool, tool: read}}
  - {{id: store, kind: tool, tool: write, arguments: {{v: "${{steps.fetch.output}}"}}}}
"""


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def test_every_yaml_file_under_the_paths_is_one_workflow(tmp_path: Path) -> None:
    write(tmp_path / "flows", "b.yml", FETCH.format(name="second"))
    write(tmp_path / "flows", "a.yaml", FETCH.format(name="first"))
    write(tmp_path / "flows", "notes.txt", "not a workflow")
    write(tmp_path / "flows", "draft.yaml.bak", "name: [broken")
    absolute = tmp_path / "elsewhere"
    write(absolute, "c.yaml", FETCH.format(name="third"))

    # Relative paths are under the home; absolute ones are taken as they are.
    loaded = load_files(["flows", str(absolute)], tmp_path)

    assert [w.name for w in loaded] == ["first", "second", "third"]
    first = loaded[0]
    assert [s.id for s in first.steps] == ["fetch", "store"]
    assert first.steps[1].kind == "tool" and first.steps[1].tool == "write"
    assert first.steps[1].arguments == {"v": "${steps.fetch.output}"}


def test_an_empty_directory_loads_nothing(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    assert load_files(["flows"], tmp_path) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("name: broken\nsteps: [\n", "workflow file"),  # YAML that does not parse
        ("name: broken\nname: again\nsteps: []\n", "workflow file"),  # a duplicate key
        (
            "name: broken\nsteps:\n  - {id: a, kind: tool, tool: read, depends_on: [ghost]}\n",
            "ghost",
        ),
        ("name: broken\nsteps:\n  - {id: a, kind: teleport}\n", "steps.0"),
        ("name: broken\nsteps: []\n", "steps"),
    ],
)
def test_a_broken_file_is_an_error_naming_it(tmp_path: Path, text: str, says: str) -> None:
    write(tmp_path / "flows", "a.yaml", FETCH.format(name="fine"))
    broken = write(tmp_path / "flows", "broken.yaml", text)

    with pytest.raises(ConfigError) as raised:
        load_files(["flows"], tmp_path)

    message = raised.value.message
    assert f"workflow file {broken}" in message
    assert says in message


def test_a_step_error_in_a_file_names_the_step(tmp_path: Path) -> None:
    broken = write(
        tmp_path / "flows",
        "cycle.yaml",
        "name: loop\nsteps:\n"
        "  - {id: a, kind: tool, tool: read, depends_on: [b]}\n"
        "  - {id: b, kind: tool, tool: read, depends_on: [a]}\n",
    )

    with pytest.raises(ConfigError) as raised:
        load_files(["flows"], tmp_path)

    assert str(broken) in raised.value.message
    assert "a → b → a" in raised.value.message or "b → a → b" in raised.value.message


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        load_files(["nowhere"], tmp_path)
