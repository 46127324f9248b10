"""E2B's legacy template build requests through the SDK's generated client (the SDK has no
method for them): ``POST /v2/templates`` (early v2 SDKs), ``POST /templates`` and
``POST /templates/{id}`` (E2B CLI 1.x, which then pushes the image), and the v1 build start
``POST /templates/{id}/builds/{buildID}``. The parsed ``TemplateLegacy`` proves the shape.

Arguments: ``v2 <alias>``, ``v1 <alias> <startCmd> <readyCmd>``, ``rebuild <templateID>``,
``start <templateID> <buildID>``.
"""

from __future__ import annotations

from typing import Any

from _common import run
from e2b.api import ApiClient
from e2b.api.client.api.templates import (
    post_templates,
    post_templates_template_id,
    post_templates_template_id_builds_build_id,
    post_v2_templates,
)
from e2b.api.client.models import TemplateBuildRequest, TemplateBuildRequestV2
from e2b.connection_config import ConnectionConfig


def _legacy(response: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": int(response.status_code)}
    parsed = response.parsed
    if parsed is not None and hasattr(parsed, "template_id"):
        out.update(
            templateID=parsed.template_id,
            buildID=parsed.build_id,
            aliases=list(parsed.aliases),
            cpuCount=parsed.cpu_count,
            memoryMB=parsed.memory_mb,
        )
    else:
        out["body"] = response.content.decode(errors="replace")
    return out


def scenario(args: list[str]) -> dict[str, Any]:
    api = ApiClient(ConnectionConfig())
    kind = args[0]
    if kind == "v2":
        body = TemplateBuildRequestV2(alias=args[1], cpu_count=1, memory_mb=512)
        return _legacy(post_v2_templates.sync_detailed(client=api, body=body))
    if kind == "v1":
        request = TemplateBuildRequest(
            dockerfile="FROM sandgate/template-base:latest",
            alias=args[1],
            start_cmd=args[2],
            ready_cmd=args[3],
            cpu_count=1,
            memory_mb=512,
        )
        return _legacy(post_templates.sync_detailed(client=api, body=request))
    if kind == "rebuild":
        request = TemplateBuildRequest(dockerfile="FROM sandgate/template-base:latest")
        return _legacy(post_templates_template_id.sync_detailed(args[1], client=api, body=request))
    if kind == "start":
        started = post_templates_template_id_builds_build_id.sync_detailed(
            args[1], args[2], client=api
        )
        return {"status": int(started.status_code), "body": started.content.decode()}
    raise SystemExit(f"unknown scenario step {kind}")


if __name__ == "__main__":
    run(scenario)
