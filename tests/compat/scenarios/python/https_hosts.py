"""HTTPS hosts out of the box (issue 13): with only ``E2B_API_KEY``, ``E2B_DOMAIN`` (with the
server's port) and the local CA trusted through the usual variables, the SDK speaks E2B's own
host scheme: the API at ``https://api.<domain>``, envd at ``https://49983-<id>.<domain>``, the
code interpreter at ``https://49999-<id>.<domain>``, a user's service at
``https://{sandbox.get_host(port)}`` (with the traffic token), and signed ``download_url()``s."""

from __future__ import annotations

import os
from typing import Any

import httpx
from _common import attempt, command_result, run
from _data import poll
from e2b_code_interpreter import Sandbox

PORT = 8000


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "no_urls_given": not any(
            os.environ.get(name) for name in ("E2B_API_URL", "E2B_SANDBOX_URL")
        )
    }
    sbx = Sandbox.create()
    try:
        out["envd_url"] = sbx.envd_api_url
        out["command"] = command_result(sbx.commands.run("echo over-tls"))
        sbx.files.write("/home/user/www/hello.txt", "served over https")
        out["file"] = sbx.files.read("/home/user/www/hello.txt")
        out["run_code"] = attempt(lambda: sbx.run_code("20 + 22").text)
        sbx.commands.run(
            f"python3 -m http.server {PORT}", background=True, cwd="/home/user/www", timeout=0
        )
        host = sbx.get_host(PORT)
        out["host"] = host
        token = sbx.traffic_access_token or ""
        with httpx.Client(timeout=10) as http:
            served = poll(
                lambda: (
                    (
                        r := http.get(
                            f"https://{host}/hello.txt",
                            headers={"E2B-Traffic-Access-Token": token},
                        )
                    ).status_code
                    == 200
                    and r
                ),
                20,
            )
            out["get_host"] = (
                {"status": served.status_code, "body": served.text} if served else None
            )
            out["get_host_without_token"] = http.get(f"https://{host}/hello.txt").status_code
            url = sbx.download_url("/home/user/www/hello.txt")
            out["download_url"] = url.split("?")[0]
            out["download"] = http.get(url).text
    finally:
        out["killed"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
