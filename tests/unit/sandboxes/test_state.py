"""The sandbox state machine refuses every move its table does not name, with a message that
says what the sandbox is; snapshot names are checked before anything is saved."""

from __future__ import annotations

import itertools

import pytest

from sandgate.errors import Conflict, InvalidRequest
from sandgate.sandboxes.snapshots import SnapshotName
from sandgate.sandboxes.state import SandboxState, check_transition

S = SandboxState
LEGAL = {
    (S.STARTING, S.RUNNING),
    (S.STARTING, S.KILLED),
    (S.RUNNING, S.PAUSED),
    (S.RUNNING, S.STORED),
    (S.RUNNING, S.KILLED),
    (S.PAUSED, S.RUNNING),
    (S.PAUSED, S.STORED),
    (S.PAUSED, S.KILLED),
    (S.STORED, S.RESUMING),
    (S.STORED, S.KILLED),
    (S.RESUMING, S.RUNNING),
    (S.RESUMING, S.STORED),
    (S.RESUMING, S.KILLED),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_only_the_named_moves_are_allowed(current: SandboxState, target: SandboxState) -> None:
    if (current, target) in LEGAL:
        check_transition("abc", current, target)
        return
    with pytest.raises(Conflict) as refused:
        check_transition("abc", current, target)
    assert "sandbox abc" in refused.value.message


@pytest.mark.parametrize(
    ("current", "target", "message"),
    [
        (S.PAUSED, S.PAUSED, "cannot pause sandbox abc: it is paused"),
        (S.STORED, S.STORED, "cannot pause sandbox abc: it is paused (to disk)"),
        (S.STARTING, S.PAUSED, "cannot pause sandbox abc: it is starting"),
        (S.KILLED, S.RUNNING, "cannot resume sandbox abc: it is killed"),
        (S.STORED, S.RUNNING, "cannot resume sandbox abc: it is paused (to disk)"),
        (S.KILLED, S.KILLED, "cannot move sandbox abc to killed: it is killed"),
    ],
)
def test_a_refusal_names_the_current_state(
    current: SandboxState, target: SandboxState, message: str
) -> None:
    with pytest.raises(Conflict) as refused:
        check_transition("abc", current, target)
    assert refused.value.message == message


@pytest.mark.parametrize(
    ("text", "name", "tag"),
    [
        ("my-snapshot", "my-snapshot", "default"),
        ("a_1:v2.1", "a_1", "v2.1"),
        ("x:", "x", "default"),
    ],
)
def test_snapshot_names_parse(text: str, name: str, tag: str) -> None:
    assert SnapshotName.parse(text) == SnapshotName(name, tag)


@pytest.mark.parametrize(
    "text", ["", "My", "-lead", "a/b", "a:b:c", "x" * 64, "a:" + "t" * 64, "a b", "é", "a:-t"]
)
def test_bad_snapshot_names_are_refused_with_the_rule(text: str) -> None:
    with pytest.raises(InvalidRequest, match="lowercase letters, digits"):
        SnapshotName.parse(text)
