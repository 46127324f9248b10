"""The ``egress`` config section."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from sandgate.config import Config


def test_rule_shorthand_and_defaults() -> None:
    config = Config.model_validate({"egress": {"allow": ["pypi.org", "*.x.test:8443,443"]}})
    first, second = config.egress.allow
    assert (first.host, first.ports) == ("pypi.org", [443, 80])
    assert (second.host, second.ports) == ("*.x.test", [8443, 443])
    assert config.egress.internet_access == []


@pytest.mark.parametrize(
    "rule", ["example.*", "http://a.test/", "a.test:99999", "a.test:x", {"host": "a", "x": 1}]
)
def test_bad_rules_are_refused(rule: object) -> None:
    with pytest.raises(ValidationError):
        Config.model_validate({"egress": {"allow": [rule]}})


def test_agent_rules_name_declared_agents() -> None:
    with pytest.raises(ValidationError, match="undeclared agents: ghost"):
        Config.model_validate({"egress": {"agents": {"ghost": ["a.test"]}}})


def test_resolve_overrides_are_addresses() -> None:
    config = Config.model_validate({"egress": {"resolve_overrides": {"a.test": ["127.0.0.1"]}}})
    assert config.egress.resolve_overrides["a.test"] == [ipaddress.ip_address("127.0.0.1")]
