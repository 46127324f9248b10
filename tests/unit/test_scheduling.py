"""The units xdist shares among workers (tests/fixtures/scheduling.py): a module is split only
by the parameters its servers and clients are set up per."""

from __future__ import annotations

import pytest

from tests.fixtures.scheduling import scope_of


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        (
            "tests/compat/test_code_interpreter.py::test_charts[py-e2b-2.31.0-docker-bar]",
            "tests/compat/test_code_interpreter.py@py-e2b-2.31.0@docker",
        ),
        (
            "tests/compat/test_agent_frameworks.py::test_run[py-openai-agents-0.24.0-bwrap]",
            "tests/compat/test_agent_frameworks.py@py-openai-agents-0.24.0@bwrap",
        ),
        (
            "tests/integration/workflows/test_crash.py::test_resume[postgres-docker]",
            "tests/integration/workflows/test_crash.py@postgres@docker",
        ),
        ("tests/unit/test_x.py::test_values[docker-image-1]", "tests/unit/test_x.py@docker"),
        ("tests/unit/test_x.py::test_values[1-2]", "tests/unit/test_x.py"),
        ("tests/unit/test_x.py::test_plain", "tests/unit/test_x.py"),
        ("tests/unit/test_x.py::TestGroup::test_values[a-b]", "tests/unit/test_x.py::TestGroup"),
        ("tests/unit/test_x.py::test_values[dockerfile-bwrapper]", "tests/unit/test_x.py"),
    ],
)
def test_scope_of(nodeid: str, scope: str) -> None:
    assert scope_of(nodeid) == scope
