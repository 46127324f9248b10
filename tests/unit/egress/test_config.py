"""The ``egress`` config section."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from sandgate.config import Config, EgressRule, PresetRule


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


def test_presets_expand_anywhere_a_rule_list_is_accepted() -> None:
    config = Config.model_validate(
        {
            "egress": {
                "allow": ["pypi"],
                "templates": {"node": ["npm"]},
                "internet_access": ["internet"],
                "api_allow_out": ["github"],
            }
        }
    )
    (pypi,) = config.egress.allow
    assert isinstance(pypi, PresetRule)
    assert [(r.host, r.ports) for r in pypi.rules] == [
        ("pypi.org", [443]),
        ("files.pythonhosted.org", [443]),
    ]
    (npm,) = config.egress.templates["node"]
    assert isinstance(npm, PresetRule) and npm.preset == "npm"


@pytest.mark.parametrize("word", ["pypy", "localhost", "PIP"])
def test_unknown_preset_is_a_config_error_listing_the_known_ones(word: str) -> None:
    with pytest.raises(ValidationError) as error:
        Config.model_validate({"egress": {"internet_access": [word]}})
    message = str(error.value)
    assert f"unknown egress preset '{word}'" in message
    assert "pypi, npm, debian, ubuntu, github, internet" in message


def test_single_label_hosts_stay_hosts_in_object_form_or_with_a_port() -> None:
    config = Config.model_validate({"egress": {"allow": [{"host": "minio"}, "minio:9000"]}})
    first, second = config.egress.allow
    assert isinstance(first, EgressRule) and first.host == "minio"
    assert isinstance(second, EgressRule) and second.ports == [9000]


def test_with_presets_adds_each_once() -> None:
    egress = Config.model_validate({"egress": {"allow": ["pypi", "a.test"]}}).egress
    added = egress.with_presets(["pypi", "npm", "debian"])
    names = [e.preset if isinstance(e, PresetRule) else e.host for e in added.allow]
    assert names == ["pypi", "a.test", "npm", "debian"]
