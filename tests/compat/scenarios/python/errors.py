"""Error mapping: each failure must surface as the SDK's own exception class and message.

Argument: an API key the test has revoked.
"""

from __future__ import annotations

import secrets
from typing import Any

from _common import attempt, describe_error, run
from e2b import CommandExitException, Sandbox, SandboxQuery

MISSING_SANDBOX_ID = "sandgatemissing00000"


def _create_expecting_failure(**kwargs: Any) -> dict[str, Any]:
    """``Sandbox.create`` that should fail; a sandbox created anyway is killed and reported."""
    try:
        sbx = Sandbox.create(**kwargs)
    except Exception as exc:
        return {"ok": False, "error": describe_error(exc)}
    Sandbox.kill(sbx.sandbox_id)
    return {"ok": True, "value": sbx.sandbox_id}


def scenario(args: list[str]) -> dict[str, Any]:
    revoked_key = args[0]
    unknown_key = "e2b_" + secrets.token_hex(20)
    out: dict[str, Any] = {"unknown_key": unknown_key}
    out["unknown_template"] = _create_expecting_failure(
        template=f"sandgate-no-such-template-{secrets.token_hex(4)}"
    )
    out["bad_key_create"] = _create_expecting_failure(template="base", api_key=unknown_key)
    out["bad_key_list"] = attempt(
        lambda: len(Sandbox.list(query=SandboxQuery(), api_key=unknown_key).next_items())
    )
    out["revoked_key_create"] = _create_expecting_failure(template="base", api_key=revoked_key)
    out["kill_unknown"] = attempt(lambda: Sandbox.kill(MISSING_SANDBOX_ID))
    out["connect_unknown"] = attempt(lambda: Sandbox.connect(MISSING_SANDBOX_ID).sandbox_id)
    out["get_info_unknown"] = attempt(lambda: Sandbox.get_info(MISSING_SANDBOX_ID).sandbox_id)
    out["timeout_out_of_range"] = _create_expecting_failure(template="base", timeout=10**9)

    sbx = Sandbox.create("base")
    try:
        try:
            sbx.commands.run("echo out; echo oops >&2; exit 3")
            out["command_exit"] = {"ok": True}
        except CommandExitException as exc:
            out["command_exit"] = {"ok": False, "error": describe_error(exc)}
    finally:
        sbx.kill()
    return out


if __name__ == "__main__":
    run(scenario)
