"""The sudo shim's command line: what people and tools type."""

from __future__ import annotations

import pytest

from sandgate.guest.sudo import UsageError, parse


@pytest.mark.parametrize(
    ("line", "argv", "user", "env"),
    [
        ("apt-get install -y jq", ["apt-get", "install", "-y", "jq"], "root", {}),
        ("-n -E pip install x", ["pip", "install", "x"], "root", {}),
        ("-nE -- ls -l", ["ls", "-l"], "root", {}),
        ("-u user id -un", ["id", "-un"], "user", {}),
        ("-uuser id", ["id"], "user", {}),
        ("--user=nobody id", ["id"], "nobody", {}),
        ("--preserve-env=PATH,HOME env", ["env"], "root", {}),
        ("A=1 B=x=y env", ["env"], "root", {"A": "1", "B": "x=y"}),
        ("sh -c 'A=1'", ["sh", "-c", "'A=1'"], "root", {}),
    ],
)
def test_parse_options_assignments_and_command(
    line: str, argv: list[str], user: str, env: dict[str, str]
) -> None:
    request = parse(line.split(" ") if "'" not in line else ["sh", "-c", "'A=1'"])
    assert (request.argv, request.user, request.env) == (argv, user, env)


def test_parse_login_shell_and_actions() -> None:
    assert parse(["-i"]).login and parse(["-i"]).argv == []
    assert parse(["-s", "echo", "x"]).shell
    assert parse(["-l"]).action == "list"
    assert parse(["-v"]).action == "validate"
    assert parse(["-D", "/tmp", "pwd"]).chdir == "/tmp"


@pytest.mark.parametrize("line", [["-Q", "x"], ["-u"], ["--bogus", "x"], ["-g", "staff", "id"]])
def test_parse_refuses_what_it_cannot_honour(line: list[str]) -> None:
    with pytest.raises(UsageError):
        parse(line)
