"""Team template builds over raw HTTP (security.md, "Template builds"; issue 18 part A).

TPL cases: the build-context upload is opened by its URL's signature alone (a forged, altered
or expired one is refused); a hostile context archive (names leaving the context, a symlink
pointing out of it, a device node, a hard link) is refused with a 400 naming the member, and an
oversized one with a 413 while it streams, nothing stored either way; another team can neither
see, tag, build from nor delete a team's template, and never gets its cached layers.

One server for the module, with ``templates.max_context_mib`` at 1 so the size limit is cheap
to cross. Builds start from the shipped ``base`` and run one short step on Docker.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import secrets
import tarfile
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.fixtures.server import RunningServer, ServerFactory
from tests.framework.template_api import new_team_api, start_build, wait_build

pytestmark = pytest.mark.docker

MAX_CONTEXT_MIB = 1
HASH = "ab" * 32


@pytest.fixture(scope="module")
def server(sandgate_server_factory: ServerFactory) -> RunningServer:
    return sandgate_server_factory(config={"templates": {"max_context_mib": MAX_CONTEXT_MIB}})


@pytest.fixture(scope="module")
def owner(server: RunningServer) -> httpx.Client:
    return new_team_api(server, "tpl-owner")[1]


@pytest.fixture(scope="module")
def intruder(server: RunningServer) -> httpx.Client:
    return new_team_api(server, "tpl-intruder")[1]


def _waiting_template(client: httpx.Client) -> str:
    created = client.post("/v3/templates", json={"name": f"ctx-{secrets.token_hex(4)}"})
    assert created.status_code == 202, created.text
    template_id: str = created.json()["templateID"]
    return template_id


def _upload_url(client: httpx.Client, template_id: str) -> str:
    link = client.get(f"/templates/{template_id}/files/{HASH}")
    assert link.status_code == 201, link.text
    assert link.json()["present"] is False
    url: str = link.json()["url"]
    return url


def _stored(server: RunningServer, template_id: str) -> list[str]:
    """Every file under the template's context directory (temporary uploads included)."""
    root = server.home / "templates" / "files" / template_id
    return sorted(p.name for p in root.rglob("*")) if root.exists() else []


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


def _with(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update(params)
    return parts._replace(query="&".join(f"{k}={v}" for k, v in query.items())).geturl()


def test_TPL_upload_with_a_bad_or_expired_signature_is_refused(
    server: RunningServer, owner: httpx.Client
) -> None:
    template_id = _waiting_template(owner)
    url = _upload_url(owner, template_id)
    archive = _tar((_member("ok.txt"), b"fine\n"))
    signature = parse_qs(urlsplit(url).query)["signature"][0]
    other_template = _waiting_template(owner)
    past = int(time.time()) - 10
    key = (server.home / "templates" / "upload.key").read_bytes()
    # Signed with the server's own key, so only the expiry is wrong.
    expired_signature = hmac.new(
        key, f"{template_id}/{HASH}/{past}".encode(), hashlib.sha256
    ).hexdigest()
    refused = [
        _with(url, signature=""),
        _with(url, signature=("0" if signature[0] != "0" else "1") + signature[1:]),
        _with(url, expires=str(int(time.time()) + 7200)),  # a later expiry, the old signature
        _with(url, expires=str(past), signature=expired_signature),
        url.replace(template_id, other_template),  # one template's URL for another
        url.replace(HASH, "cd" * 32),  # one archive's URL for another
    ]
    for bad in refused:
        response = httpx.put(bad, content=archive)
        assert response.status_code == 403, (bad, response.text)
        assert "ask for a new one" in response.json()["message"]
    assert _stored(server, template_id) == []
    assert _stored(server, other_template) == []
    # The URL as issued works: the refusals above were the signature's doing.
    assert httpx.put(url, content=archive).status_code == 200
    assert owner.get(f"/templates/{template_id}/files/{HASH}").json()["present"] is True


def _device() -> tarfile.TarInfo:
    info = _member("dev/null-ish", tarfile.CHRTYPE)
    info.devmajor, info.devminor = 1, 3
    return info


UNSAFE: dict[str, tuple[Callable[[], bytes], str]] = {
    "dotdot": (lambda: _tar((_member("../evil.txt"), b"x")), "leaves the build context"),
    "nested-dotdot": (
        lambda: _tar((_member("files/../../evil.txt"), b"x")),
        "leaves the build context",
    ),
    "absolute": (lambda: _tar((_member("/etc/evil.txt"), b"x")), "leaves the build context"),
    "symlink-up": (
        lambda: _tar((_member("files/link", tarfile.SYMTYPE, "../../etc/passwd"), None)),
        "outside the build context",
    ),
    "symlink-absolute": (
        lambda: _tar((_member("link", tarfile.SYMTYPE, "/etc/shadow"), None)),
        "outside the build context",
    ),
    "device": (lambda: _tar((_device(), None)), "not a file, directory or symlink"),
    "hardlink": (
        lambda: _tar((_member("a.txt"), b"a"), (_member("b", tarfile.LNKTYPE, "a.txt"), None)),
        "not a file, directory or symlink",
    ),
    "not-a-tar": (lambda: b"plain bytes, no archive", "not a (gzip'ed) tar archive"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_TPL_upload_of_an_unsafe_context_archive_is_refused(
    server: RunningServer, owner: httpx.Client, case: str
) -> None:
    make, message = UNSAFE[case]
    template_id = _waiting_template(owner)
    response = httpx.put(_upload_url(owner, template_id), content=make())
    assert response.status_code == 400, response.text
    assert response.json()["error_code"] == "invalid_request"
    assert message in response.json()["message"], response.text
    assert _stored(server, template_id) == []
    assert owner.get(f"/templates/{template_id}/files/{HASH}").json()["present"] is False


def test_TPL_upload_larger_than_max_context_mib_is_refused_while_streaming(
    server: RunningServer, owner: httpx.Client
) -> None:
    template_id = _waiting_template(owner)

    def chunks() -> Any:
        for _ in range(4 * MAX_CONTEXT_MIB):
            yield b"\0" * (512 * 1024)

    response = httpx.put(_upload_url(owner, template_id), content=chunks())
    assert response.status_code == 413, response.text
    assert "templates.max_context_mib" in response.json()["message"]
    assert _stored(server, template_id) == []
    assert owner.get(f"/templates/{template_id}/files/{HASH}").json()["present"] is False


@pytest.fixture(scope="module")
def built(owner: httpx.Client) -> dict[str, Any]:
    """The owner's template, built from ``base`` with a step unique to this run."""
    name = f"tpl-own-{secrets.token_hex(4)}"
    body = {
        "fromTemplate": "base",
        "steps": [{"type": "RUN", "args": [f"echo {secrets.token_hex(8)} > /tmp/mark"]}],
    }
    template_id, build_id = start_build(owner, name, body)
    status = wait_build(owner, template_id, build_id)
    assert status["status"] == "ready", status
    return {"name": name, "id": template_id, "build": build_id, "body": body, "status": status}


def test_TPL_another_team_cannot_see_tag_build_from_or_delete_a_template(
    owner: httpx.Client, intruder: httpx.Client, built: dict[str, Any]
) -> None:
    name, template_id, build_id = built["name"], built["id"], built["build"]
    for ref in (name, template_id):
        assert intruder.get(f"/templates/{ref}").status_code == 404
        assert intruder.get(f"/templates/{ref}/tags").status_code == 404
        assert (
            intruder.get(f"/templates/{ref}/tags/exists", params={"tag": "default"}).status_code
            == 404
        )
        assert intruder.patch(f"/v2/templates/{ref}", json={"public": True}).status_code == 404
        assert intruder.delete(f"/templates/{ref}").status_code == 404
        assert intruder.get(f"/templates/{ref}/files/{HASH}").status_code == 404
        assert intruder.post("/sandboxes", json={"templateID": ref}).status_code == 404
    # E2B's alias check answers "exists, not yours" (403), and nothing more.
    alias = intruder.get(f"/templates/aliases/{name}")
    assert alias.status_code == 403 and template_id not in alias.text
    status = intruder.get(f"/templates/{template_id}/builds/{build_id}/status")
    assert status.status_code == 404
    assert intruder.get(f"/templates/{template_id}/builds/{build_id}/logs").status_code == 404
    tagged = intruder.post("/templates/tags", json={"target": f"{name}:default", "tags": ["x"]})
    assert tagged.status_code == 404, tagged.text
    untagged = intruder.request(
        "DELETE", "/templates/tags", json={"name": name, "tags": ["default"]}
    )
    assert untagged.status_code == 404, untagged.text
    assert f"template '{name}' not found" in untagged.json()["message"], untagged.text
    # Building from it, or starting a build of it, finds nothing either.
    created = intruder.post("/v3/templates", json={"name": f"thief-{secrets.token_hex(3)}"})
    ids = created.json()
    stolen = intruder.post(
        f"/v2/templates/{ids['templateID']}/builds/{ids['buildID']}",
        json={"fromTemplate": name, "steps": [{"type": "RUN", "args": ["true"]}]},
    )
    assert stolen.status_code == 404, stolen.text
    hijack = intruder.post(f"/v2/templates/{template_id}/builds/{build_id}", json=built["body"])
    assert hijack.status_code == 404, hijack.text
    listed = [t["templateID"] for t in intruder.get("/v2/templates").json()]
    assert template_id not in listed
    # Still the owner's, untouched; its owner can tag and untag it.
    mine = owner.get(f"/templates/{template_id}/tags").json()
    assert [t["tag"] for t in mine] == ["default"]
    tagged = owner.post("/templates/tags", json={"target": f"{name}:default", "tags": ["x"]})
    assert tagged.status_code == 201, tagged.text
    untagged = owner.request("DELETE", "/templates/tags", json={"name": name, "tags": ["x"]})
    assert untagged.status_code == 204, untagged.text
    assert [t["tag"] for t in owner.get(f"/templates/{template_id}/tags").json()] == ["default"]


def test_TPL_another_team_never_reuses_a_teams_cached_layers(
    owner: httpx.Client, intruder: httpx.Client, built: dict[str, Any]
) -> None:
    def cached(status: dict[str, Any]) -> list[str]:
        return [e["message"] for e in status["logEntries"] if e["message"].startswith("CACHED")]

    assert cached(built["status"]) == []  # the owner's first build ran every step
    same = start_build(intruder, f"tpl-same-{secrets.token_hex(4)}", built["body"])
    status = wait_build(intruder, *same)
    assert status["status"] == "ready", status
    assert cached(status) == [], status["logEntries"]
    # The owner's own identical rebuild does come from the cache: the check above could fail.
    again = wait_build(owner, *start_build(owner, built["name"], built["body"]))
    assert again["status"] == "ready", again
    assert len(cached(again)) == 2, cached(again)  # [base] and [1/1]
