"""The pinned client environments themselves: right versions, reused when unchanged."""

from __future__ import annotations

import pytest

from .clients import PreparedClient, prepare
from .expect import sdk_version

pytestmark = pytest.mark.compat

CODE_INTERPRETER = {
    "py-e2b-2.31.0": ("e2b-code-interpreter", "2.9.0"),
    "py-e2b-2.63.0": ("e2b-code-interpreter", "2.11.5"),
    "js-e2b-2.31.0": ("@e2b/code-interpreter", "2.7.0"),
    "js-e2b-2.51.0": ("@e2b/code-interpreter", "2.8.0"),
}


def test_installed_versions(client: PreparedClient) -> None:
    result = client.run("versions", {})
    package, version = CODE_INTERPRETER[client.name]
    assert result["versions"] == {"e2b": sdk_version(client), package: version}
    expected_modules = ["e2b", "e2b_code_interpreter"] if client.lang == "python" else None
    assert result["modules"] == (expected_modules or ["function", "function"])


def test_prepare_reuses_current_environment(client: PreparedClient) -> None:
    stamp = client.root / "stamp"
    before = stamp.stat().st_mtime_ns
    assert prepare(client.spec) == client
    assert stamp.stat().st_mtime_ns == before
