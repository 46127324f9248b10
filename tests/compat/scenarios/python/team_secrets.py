"""Team secrets: create, read back (never the value), update, list, check and destroy, and a
sandbox whose ``network.rules`` put one in a header for the bound host only.

SDKs before 2.46 have no ``Secret``: the same calls go over raw HTTP to the routes the newest
SDK uses (``E2B_API_URL`` and ``E2B_API_KEY``, as the SDK would send them).

Arguments: the secret's name, its value, its next value, the bound host and an HTTPS URL on
it that echoes request headers."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from _common import attempt, run
from e2b import Sandbox

try:
    from e2b import Secret
except ImportError:  # e2b < 2.46
    Secret = None


def _raw(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        os.environ["E2B_API_URL"] + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"X-API-KEY": os.environ["E2B_API_KEY"], "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
            return {"status": response.status, "body": json.loads(data) if data else None}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": json.loads(exc.read() or b"null")}


def _info(info: Any) -> dict[str, Any]:
    return {
        "id": info.secret_id,
        "name": info.name,
        "version": info.version,
        "metadata": dict(info.metadata),
        "fields": sorted(vars(info)),
    }


def _raw_info(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": body["secretID"],
        "name": body["name"],
        "version": body["currentVersion"],
        "metadata": body["metadata"],
        "fields": sorted(body),
    }


def scenario(args: list[str]) -> dict[str, Any]:
    name, value, next_value, host, url = args
    out: dict[str, Any] = {"sdk_secret": Secret is not None}
    if Secret is not None:
        created = Secret.create(name, value, metadata={"team": "compat"})
        out["created"] = _info(created)
        out["by_name"] = _info(Secret.get_info(name))
        out["updated"] = _info(Secret.update(created.secret_id, next_value))
        paginator = Secret.list()
        out["listed"] = [item.name for item in paginator.next_items()]
        out["exists"] = Secret.exists(name)
        placeholder = Secret.fill(name)
    else:
        made = _raw(
            "POST", "/secrets", {"name": name, "value": value, "metadata": {"team": "compat"}}
        )
        out["created"] = _raw_info(made["body"])
        out["by_name"] = _raw_info(_raw("GET", f"/secrets/{name}")["body"])
        updated = _raw("POST", f"/secrets/{made['body']['secretID']}", {"value": next_value})
        out["updated"] = _raw_info(updated["body"])
        out["listed"] = [item["name"] for item in _raw("GET", "/secrets")["body"]]
        out["exists"] = _raw("GET", f"/secrets/{name}")["status"] == 200
        placeholder = "${e2b.secrets." + name + "}"
    rules = {host: [{"transform": {"headers": {"Authorization": f"Bearer {placeholder}"}}}]}
    sandbox = Sandbox.create("base", network={"rules": rules})
    try:
        result = sandbox.commands.run(f"curl -sS -D - {url}")
        out["request"] = {"exit_code": result.exit_code, "stdout": result.stdout}
        out["env_has_value"] = value in sandbox.commands.run("env").stdout
    finally:
        attempt(sandbox.kill)
    if Secret is not None:
        out["destroyed"] = Secret.destroy(out["created"]["id"])
        out["destroyed_again"] = Secret.destroy(out["created"]["id"])
        out["exists_after"] = Secret.exists(name)
        out["get_after"] = attempt(lambda: Secret.get_info(name))
    else:
        out["destroyed"] = _raw("DELETE", f"/secrets/{out['created']['id']}")["status"] == 204
        out["destroyed_again"] = _raw("DELETE", f"/secrets/{out['created']['id']}")["status"] == 204
        out["exists_after"] = _raw("GET", f"/secrets/{name}")["status"] == 200
        out["get_after"] = {"ok": False, "status": _raw("GET", f"/secrets/{name}")["status"]}
    return out


if __name__ == "__main__":
    run(scenario)
