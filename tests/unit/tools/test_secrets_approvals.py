"""Secrets (sources, redaction) and approvals (decide once, timeout denies)."""

import asyncio
from pathlib import Path

import pytest

from sandgate.approvals import ApprovalService, ApprovalState
from sandgate.config import SecretSource
from sandgate.errors import Conflict, ToolFailed
from sandgate.secrets import Redactor, SecretStore


def test_secrets_from_env_and_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("file-secret\n")
    store = SecretStore(
        {"A": SecretSource(env="MY_A"), "B": SecretSource(file=str(tmp_path / "token"))},
        environ={"MY_A": "env-secret"},
    )
    assert store.resolve(["A", "B"]) == {"A": "env-secret", "B": "file-secret"}


def test_missing_secret_fails_without_leaking() -> None:
    store = SecretStore({"A": SecretSource(env="NOT_SET")}, environ={})
    with pytest.raises(ToolFailed, match="NOT_SET"):
        store.resolve(["A"])
    assert store.all_values() == {}


def test_redaction_covers_nested_values_and_keys() -> None:
    redactor = Redactor({"TOKEN": "s3cr3t-value", "SHORT": "s3cr3t"})
    out = redactor.redact({"echo": ["x s3cr3t-value y"], "s3cr3t": 1, "n": 2})
    assert out == {"echo": ["x [REDACTED:TOKEN] y"], "[REDACTED:SHORT]": 1, "n": 2}


def test_approval_is_decided_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        service = ApprovalService(tmp_path, timeout_s=30)
        pending = await service.request(
            sandbox_id="sb",
            subject={"team": "t"},
            tool="kv",
            action="set",
            arguments={},
            rule_id="r",
        )
        waiter = asyncio.create_task(service.wait(pending.id))
        service.decide(pending.id, approve=True, by="test")
        assert (await waiter).state is ApprovalState.APPROVED
        with pytest.raises(Conflict):
            service.decide(pending.id, approve=False, by="test")

    asyncio.run(scenario())


def test_approval_timeout_denies(tmp_path: Path) -> None:
    async def scenario() -> None:
        service = ApprovalService(tmp_path, timeout_s=0.2)
        pending = await service.request(
            sandbox_id="sb", subject={}, tool="kv", action="set", arguments={}, rule_id="r"
        )
        final = await service.wait(pending.id)
        assert final.state is ApprovalState.EXPIRED
        with pytest.raises(Conflict):
            service.decide(pending.id, approve=True, by="late")

    asyncio.run(scenario())
