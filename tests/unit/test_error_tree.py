"""One error tree, one code → status table: every error's HTTP status and Connect code are
declared once (on its class), and each edge answers with them and nothing else."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import sandgate
from sandgate import errors
from sandgate.api.e2b.connect import RpcError, rpc_error_response, stream_error_response
from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.errors import e2b_error_response
from sandgate.errors import (
    CONNECT_STATUS,
    GuestError,
    GuestUnavailable,
    SandboxUnavailable,
    SandgateError,
    error_for_code,
    guest_kind,
)
from sandgate.guest import client
from sandgate.guest.protocol import ERROR_CODES, ERROR_REASONS


def _tree() -> list[type[SandgateError]]:
    """Every class of the tree except the guest's, whose code is that of the guest's answer."""
    found: list[type[SandgateError]] = []
    pending: list[type[SandgateError]] = [SandgateError]
    while pending:
        cls = pending.pop()
        if issubclass(cls, GuestError):
            continue
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


TREE = _tree()


def test_every_code_has_one_class_one_status_and_a_connect_code() -> None:
    codes = [cls.code for cls in TREE]
    assert len(codes) == len(set(codes)), "two classes share a code"
    for cls in TREE:
        assert 400 <= cls.status <= 599, cls
        assert cls.connect in CONNECT_STATUS, cls


def test_the_module_docstring_table_is_what_the_classes_say() -> None:
    """The table at the top of errors.py is what readers trust: its HTTP status and Connect
    code columns must be the classes' own."""
    doc = errors.__doc__ or ""
    for cls in TREE:
        if cls is SandgateError:
            continue
        row = re.search(rf"\b{cls.__name__}[ \t]+{re.escape(cls.code)}[ \t]*(.*)", doc)
        assert row is not None, f"{cls.__name__} is not in the errors.py table"
        rest = row.group(1)
        status = re.match(r"(\d{3})\b", rest)
        if status is not None:
            assert int(status.group(1)) == cls.status, cls
        named = set(re.findall(r"\b([a-z]+(?:_[a-z]+)*)\b", rest)) & set(CONNECT_STATUS)
        if named:
            assert named == {cls.connect}, cls


@pytest.mark.parametrize("cls", TREE, ids=lambda c: c.__name__)
def test_http_edge_answers_the_class_status_and_code(cls: type[SandgateError]) -> None:
    response = e2b_error_response(cls("what to do next"))
    body = json.loads(bytes(response.body))
    assert response.status_code == cls.status
    assert body == {"code": cls.status, "message": "what to do next", "error_code": cls.code}


@pytest.mark.parametrize("cls", TREE, ids=lambda c: c.__name__)
def test_connect_edge_answers_the_class_connect_code(cls: type[SandgateError]) -> None:
    error = cls("what to do next")
    unary = rpc_error_response(RpcError(error.connect, error.message))
    assert unary.status_code == CONNECT_STATUS[cls.connect]
    assert json.loads(bytes(unary.body))["code"] == cls.connect
    stream = stream_error_response(RpcError(error.connect, error.message))
    assert stream.status_code == 200
    assert json.loads(bytes(stream.body)[5:])["error"]["code"] == cls.connect


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_a_guest_failure_reads_the_same_on_both_edges(code: str) -> None:
    """A guest answer keeps its Connect code on the envd edge and becomes the tree error of the
    same Connect status on the HTTP edge (``/files``), so neither edge decides on its own."""
    exc = GuestError(code, "refused")
    assert isinstance(exc, SandgateError)
    assert exc.connect == code
    translated = guest_failure(exc)
    assert (translated.code, translated.status) == (exc.code, exc.status)
    assert type(translated) is guest_kind(code)
    if translated.connect != "internal":
        assert CONNECT_STATUS[translated.connect] == CONNECT_STATUS[code]


@pytest.mark.parametrize("reason", sorted(ERROR_REASONS))
def test_a_guest_reason_names_the_condition(reason: str) -> None:
    code = "resource_exhausted" if reason == "disk_full" else "invalid_argument"
    exc = GuestError(code, "no", reason)
    kind = guest_kind(code, reason)
    assert kind is not SandgateError
    assert (exc.code, exc.status) == (kind.code, kind.status)
    assert exc.connect == code  # the envd edge still answers the guest's own code


def test_guest_unavailable_is_a_sandbox_unavailable_answer() -> None:
    exc = GuestUnavailable("cannot connect to the guest at /host/path.sock")
    assert isinstance(exc, GuestError)
    assert (exc.connect, exc.code, exc.status) == ("unavailable", "sandbox_unavailable", 502)
    assert "/host/path.sock" not in guest_failure(exc).message
    assert isinstance(guest_failure(exc), SandboxUnavailable)


def test_the_guest_client_raises_the_trees_classes() -> None:
    assert client.GuestError is GuestError
    assert client.GuestUnavailable is GuestUnavailable


def test_replaying_a_code_never_builds_a_guest_error() -> None:
    replayed = error_for_code("sandbox_unavailable", "gone")
    assert type(replayed) is SandboxUnavailable
    assert error_for_code("internal", "x").status == 500


_SRC = Path(sandgate.__file__).parent


def _status_tables(tree: ast.AST) -> list[int]:
    """Lines of dict literals that map HTTP statuses to Connect codes or back, or Connect
    codes to error classes: the shapes of a second code → status table."""
    found: list[int] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict) or len(node.keys) < 3:
            continue
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        values = [v.value for v in node.values if isinstance(v, ast.Constant)]
        int_keys = sum(isinstance(k, int) and 400 <= k <= 599 for k in keys)
        code_keys = sum(k in CONNECT_STATUS for k in keys if isinstance(k, str))
        code_values = sum(v in CONNECT_STATUS for v in values if isinstance(v, str))
        status_values = sum(isinstance(v, int) and 400 <= v <= 599 for v in values)
        if (
            (int_keys >= 3 and code_values >= 3)
            or (code_keys >= 3 and status_values >= 3)
            or (code_keys >= 3 and all(isinstance(v, ast.Name) for v in node.values))
        ):
            found.append(node.lineno)
    return found


def test_there_is_one_code_to_status_table() -> None:
    """Two edges disagreed once because each kept its own table; only errors.py may hold one."""
    others: dict[str, list[int]] = {}
    for path in sorted(_SRC.rglob("*.py")):
        if path == _SRC / "errors.py" or "guest" in path.relative_to(_SRC).parts[:1]:
            continue  # the guest answers errno → Connect code, which is its protocol
        lines = _status_tables(ast.parse(path.read_text(), str(path)))
        if lines:
            others[str(path.relative_to(_SRC))] = lines
    assert others == {}
    assert _status_tables(ast.parse((_SRC / "errors.py").read_text()))  # the scan finds one


def test_sandbox_exec_reports_an_unreachable_guest_as_sandbox_unavailable(
    tmp_path: Path,
) -> None:
    """``except GuestUnavailable`` once sat after ``except GuestError`` (its base class) and
    never ran: an unreachable sandbox printed a bare protocol code instead."""
    import asyncio

    from sandgate.cli.sandbox import _run
    from sandgate.guest.client import GuestClient

    guest = GuestClient(tmp_path / "absent" / "guest.sock")
    with pytest.raises(SandboxUnavailable, match="does not answer"):
        asyncio.run(_run(guest, ["true"], "user"))
