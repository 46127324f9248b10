"""Language names, aliases and the per-execution environment snippets."""

from __future__ import annotations

import os
import subprocess

import pytest

from sandgate.interpreter._languages import UnknownLanguage, language_named


@pytest.mark.parametrize(
    ("given", "name", "kernel"),
    [
        (None, "python", "python3"),
        (" Python ", "python", "python3"),
        ("js", "javascript", "deno"),
        ("TS", "typescript", "deno"),
        ("bash", "bash", "bash"),
    ],
)
def test_names_are_trimmed_lowercased_and_aliased(
    given: str | None, name: str, kernel: str
) -> None:
    language = language_named(given)
    assert (language.name, language.kernel) == (name, kernel)


def test_typescript_shares_the_javascript_default_context() -> None:
    assert language_named("typescript").default_context == "javascript"


def test_an_unknown_language_names_the_available_ones() -> None:
    with pytest.raises(UnknownLanguage, match="bash, javascript, python, typescript"):
        language_named("cobol")


def test_python_env_snippets_set_then_restore_the_environment() -> None:
    python = language_named("python")
    env = {"SG_NEW": "it's new", "HOME": "/elsewhere"}
    code = (
        "import os\n"
        + python.set_env(env)
        + "print(os.environ['SG_NEW'], os.environ['HOME'])\n"
        + python.restore_env(env)
        + "print(os.environ.get('SG_NEW'), os.environ['HOME'])\n"
    )
    scrubbed = {k: v for k, v in os.environ.items() if k != "SG_NEW"} | {"HOME": "/home/x"}
    out = subprocess.run(["python3", "-c", code], capture_output=True, text=True, env=scrubbed)
    assert out.stdout.splitlines() == ["it's new /elsewhere", "None /home/x"], out.stderr


def test_bash_env_snippets_set_then_restore_the_environment() -> None:
    bash = language_named("bash")
    env = {"SG_NEW": "a 'quoted' $value", "SG_OLD": "changed"}
    script = (
        "export SG_OLD=kept\n"
        + bash.set_env(env)
        + '\necho "$SG_NEW|$SG_OLD"\n'
        + bash.restore_env(env)
        + '\necho "${SG_NEW-unset}|$SG_OLD"\n'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["a 'quoted' $value|changed", "unset|kept"]


def test_bash_rejects_names_it_cannot_export() -> None:
    with pytest.raises(ValueError, match="invalid environment variable name"):
        language_named("bash").set_env({"A-B": "x"})
