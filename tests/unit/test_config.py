from pathlib import Path

import pytest

from sandgate.config import load_config
from sandgate.errors import ConfigError


def test_defaults_without_file() -> None:
    config = load_config(None, environ={})
    assert config.server.port == 7788
    assert config.store_url.endswith("/.sandgate/sandgate.db") or "sandgate.db" in config.store_url
    assert config.runtime.kind == "auto"


def test_yaml_file_and_env_override(tmp_path: Path) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text("server:\n  port: 9000\nlimits:\n  max_sandboxes_per_team: 3\n")
    config = load_config(
        path, environ={"SANDGATE_SERVER__PORT": "9100", "SANDGATE_HOME": str(tmp_path)}
    )
    assert config.server.port == 9100
    assert config.limits.max_sandboxes_per_team == 3
    assert config.home_dir == tmp_path


def test_json5_file(tmp_path: Path) -> None:
    path = tmp_path / "sandgate.json5"
    path.write_text("{server: {port: 8001,}, // comment\n}")
    assert load_config(path, environ={}).server.port == 8001


def test_unknown_key_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text("server:\n  prot: 1\n")
    with pytest.raises(ConfigError, match=r"server\.prot"):
        load_config(path, environ={})


def test_bad_value_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text("limits:\n  pids_limit: -5\n")
    with pytest.raises(ConfigError, match=r"limits\.pids_limit"):
        load_config(path, environ={})


def test_bad_env_value_names_its_path() -> None:
    with pytest.raises(ConfigError, match=r"runtime\.kind"):
        load_config(None, environ={"SANDGATE_RUNTIME": "lxc"})


def test_e2b_domain_is_refused() -> None:
    with pytest.raises(ConfigError, match="E2B domain"):
        load_config(None, environ={"SANDGATE_SERVER__DOMAIN": "e2b.app"})


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml", environ={})


# -- runtime.accept_below_floor: an operator accepts exactly what they name -----------------


def test_floor_exception_from_the_environment_in_flow_yaml() -> None:
    config = load_config(
        None,
        environ={
            "SANDGATE_RUNTIME__ACCEPT_BELOW_FLOOR": (
                "[{component: runc, cves: [CVE-2025-31133, CVE-2025-52565], "
                'reason: "waiting for the bookworm backport", expires: "2027-01-31"}]'
            )
        },
    )
    (exception,) = config.runtime.accept_below_floor
    assert exception.component == "runc"
    assert exception.cves == ["CVE-2025-31133", "CVE-2025-52565"]
    assert exception.reason == "waiting for the bookworm backport"
    assert str(exception.expires) == "2027-01-31"


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ("{component: runc, cves: [CVE-2025-31133]}", "reason"),  # no reason
        ("{component: runc, cves: [CVE-2025-31133], reason: '  '}", "reason"),
        ("{component: runc, cves: [], reason: r}", "cves"),  # nothing named
        ("{component: runc, cves: ['*'], reason: r}", "cves"),  # no wildcard
        ("{component: runc, cves: [all], reason: r}", "cves"),
        ("{component: runc, cves: [CVE-2025], reason: r}", "cves"),
        ("{component: crun, cves: [CVE-2025-31133], reason: r}", "component"),
        ("{component: runc, cves: [CVE-2025-31133], reason: r, everything: true}", "everything"),
    ],
)
def test_floor_exception_cannot_be_broader_than_named_cves(entry: str, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"runtime\.accept_below_floor\.0\.{where}"):
        load_config(None, environ={"SANDGATE_RUNTIME__ACCEPT_BELOW_FLOOR": f"[{entry}]"})


def test_floor_exceptions_are_not_a_switch() -> None:
    with pytest.raises(ConfigError, match=r"runtime\.accept_below_floor"):
        load_config(None, environ={"SANDGATE_RUNTIME__ACCEPT_BELOW_FLOOR": "true"})


def test_upload_limit_defaults_to_the_disk_size() -> None:
    limits = load_config(None, environ={"SANDGATE_LIMITS__DISK_MIB": "96"}).limits
    assert limits.max_upload_bytes == 96 * 1024 * 1024
    limits = load_config(None, environ={"SANDGATE_LIMITS__MAX_UPLOAD_MIB": "8"}).limits
    assert limits.max_upload_bytes == 8 * 1024 * 1024
    with pytest.raises(ConfigError, match="max_upload_mib"):
        load_config(None, environ={"SANDGATE_LIMITS__MAX_UPLOAD_MIB": "0"})


# -- strict input (issue 12, class 4) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("server:\n  port: 8000\n  port: 9000\n", "port", 3),
        ("server:\n  port: 8000\nserver:\n  port: 9000\n", "server", 3),
        ("policy:\n  rules:\n    - id: a\n      effect: allow\n      effect: deny\n", "effect", 5),
        ("server: {port: 1, port: 2}\n", "port", 1),
    ],
)
def test_strict_duplicate_yaml_key_names_the_key_and_line(
    tmp_path: Path, text: str, key: str, line: int
) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"duplicate key '{key}' at line {line}"):
        load_config(path, environ={})


def test_strict_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text(
        "x-defaults: &d {port: 8000, host: 127.0.0.2}\nserver:\n  <<: *d\n  port: 9000\n"
    )
    with pytest.raises(ConfigError, match="x-defaults"):  # an unknown section, not a dup
        load_config(path, environ={})


@pytest.mark.parametrize("suffix", [".json", ".json5"])
def test_strict_duplicate_json5_key_is_refused(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"sandgate{suffix}"
    path.write_text('{"server": {"port": 8000, "port": 9000}}')
    with pytest.raises(ConfigError, match='Duplicate key "port"'):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("server:\n  port: '8000'\n", r"server\.port: Input should be a valid integer"),
        ("server:\n  port: 8000.0\n", r"server\.port: Input should be a valid integer"),
        ("server:\n  port: true\n", r"server\.port: Input should be a valid integer"),
        ("server:\n  host: 127\n", r"server\.host: Input should be a valid string"),
        ("templates:\n  build_on_start: 'yes'\n", r"build_on_start: Input should be a valid"),
        ("templates:\n  build_on_start: 1\n", r"build_on_start: Input should be a valid"),
        ("server:\n  port: .nan\n", r"server\.port is nan"),
        ("server:\n  port: 99999999999999999999\n", "int64"),
        ("server:\n  domain: 2026-12-01\n", r"server\.domain is of type date"),
        ("1: x\n", "not a string"),
    ],
)
def test_strict_config_values_are_not_coerced(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "sandgate.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=reason):
        load_config(path, environ={})


def test_strict_json5_non_finite_numbers_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "sandgate.json5"
    path.write_text("{limits: {max_sandboxes_per_team: Infinity}}")
    with pytest.raises(ConfigError, match="inf"):
        load_config(path, environ={})


def test_strict_environment_text_is_typed_as_a_yaml_scalar_only() -> None:
    """The one documented coercion: environment values are text, read as YAML scalars."""
    config = load_config(None, environ={"SANDGATE_SERVER__PORT": "9100"})
    assert config.server.port == 9100
    with pytest.raises(ConfigError, match=r"server\.port"):
        load_config(None, environ={"SANDGATE_SERVER__PORT": "'9100'"})
    with pytest.raises(ConfigError, match=r"server\.host"):
        load_config(None, environ={"SANDGATE_SERVER__HOST": "127"})
