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


@pytest.mark.parametrize(
    ("given", "name", "kernel"),
    [("r", "r", "ir"), (" R ", "r", "ir"), ("Java", "java", "java")],
)
def test_r_and_java_have_kernels_and_default_contexts_of_their_own(
    given: str, name: str, kernel: str
) -> None:
    language = language_named(given)
    assert (language.name, language.kernel, language.default_context) == (name, kernel, name)


def test_every_language_is_listed_when_one_is_unknown() -> None:
    with pytest.raises(UnknownLanguage, match="bash, java, javascript, python, r, typescript"):
        language_named("fortran")


@pytest.mark.parametrize("language", ["python", "javascript", "bash", "r", "java"])
@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"": "x"}, "invalid environment variable name"),
        ({"A=B": "x"}, "invalid environment variable name"),
        ({"A": "x\0y"}, "NUL byte"),
    ],
)
def test_no_kernel_is_asked_to_hold_what_no_environment_can(
    language: str, env: dict[str, str], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        language_named(language).set_env(env)
    with pytest.raises(ValueError, match=problem):
        language_named(language).export_env(env)


TRICKY = 'a "quoted" \\ back\nslash\ttab \u00e9t\u00e9 \U0001f600 $HOME \\u000a end'


def test_r_literals_are_ascii_and_escape_what_r_reads_specially() -> None:
    code = language_named("r").export_env({"SG_TRICKY": TRICKY})
    assert code.isascii(), code
    assert code == (
        'invisible(Sys.setenv("SG_TRICKY" = "a \\"quoted\\" \\\\ back\\nslash\\ttab '
        '\\U{e9}t\\U{e9} \\U{1f600} $HOME \\\\u000a end"))\n'
    )


def test_java_env_snippets_set_then_restore_getenv_and_properties() -> None:
    """Runs the Java snippets in jshell with the module access the kernel spec grants."""
    java = language_named("java")
    env = {"SG_NEW": TRICKY, "HOME": "/elsewhere"}
    setup = java.setup(0)
    assert setup is not None
    script = "\n".join(
        [
            setup,
            'System.setProperty("HOME", "prop-before");',
            java.set_env(env),
            'System.out.println("1|" + System.getenv("SG_NEW").equals(' + _java(TRICKY) + "));",
            'System.out.println("2|" + System.getenv("HOME") + "|" + System.getProperty("SG_NEW")'
            '.length() + "|" + System.getProperty("HOME"));',
            java.restore_env(env),
            'System.out.println("3|" + System.getenv("SG_NEW") + "|" + System.getenv("HOME") + '
            '"|" + System.getProperty("SG_NEW") + "|" + System.getProperty("HOME"));',
            java.export_env({"SG_KEPT": "yes"}),
            java.restore_env({}),
            'System.out.println("4|" + System.getenv("SG_KEPT"));',
            "/exit",
        ]
    )
    out = subprocess.run(
        [
            "jshell",
            "-q",
            "-R--add-opens=java.base/java.lang=ALL-UNNAMED",
            "-R--add-opens=java.base/java.util=ALL-UNNAMED",
            "-",
        ],
        input=script,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "SG_NEW"} | {"HOME": "/home/x"},
        timeout=120,
    )
    lines = [line for line in out.stdout.splitlines() if "|" in line]
    assert lines == [
        "1|true",
        f"2|/elsewhere|{len(TRICKY.encode('utf-16-le')) // 2}|/elsewhere",
        "3|null|/home/x|null|prop-before",
        "4|yes",
    ], out.stdout + out.stderr


def _java(text: str) -> str:
    from sandgate.interpreter._languages import _java_string

    return _java_string(text)
