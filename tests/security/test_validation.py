"""Input validation on the data plane (security.md §2.5 VAL-*, §2.2 ESC-13), over raw HTTP.

Bad input gets a stable 4xx (Connect ``invalid_argument`` for RPCs, ``{"code": 400}`` for
``/files``), never a 500 and never a hang; names that merely look like traversal are literal
names inside the sandbox. Host invariants: nothing appears on the host's file system.
"""

from __future__ import annotations

import gzip
import secrets
from pathlib import Path

import httpx
import pytest

from tests.framework.sandbox_http import SandboxHttp

pytestmark = pytest.mark.docker


def _rpc_error(response: httpx.Response, code: str, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert body["code"] == code, body
    return str(body["message"])


def test_VAL_01_nul_bytes_in_paths(sbx: SandboxHttp) -> None:
    for method in ("Stat", "ListDir", "MakeDir", "Remove"):
        response = sbx.rpc(f"filesystem.Filesystem/{method}", {"path": "a\u0000/../../etc/passwd"})
        assert "NUL" in _rpc_error(response, "invalid_argument", 400), method
    moved = sbx.rpc(
        "filesystem.Filesystem/Move", {"source": "/home/user", "destination": "x\u0000y"}
    )
    _rpc_error(moved, "invalid_argument", 400)
    for query in ("path=a%00b", "path=%00", "path=/etc/passwd%00.txt"):
        response = sbx.get_file_raw_query(query)
        assert response.status_code == 400, (query, response.text)
        assert response.json()["code"] == 400
    upload = sbx.put_file("x\u0000y", b"data")
    assert upload.status_code == 400, upload.text


def test_VAL_01_over_long_paths(sbx: SandboxHttp) -> None:
    long_path = "/home/user/" + "a/" * 2100  # > 4096 bytes
    assert len(long_path.encode()) > 4096
    _rpc_error(sbx.rpc("filesystem.Filesystem/Stat", {"path": long_path}), "invalid_argument", 400)
    assert sbx.get_file(long_path).status_code == 400
    assert sbx.put_file(long_path, b"x").status_code == 400
    # One component over NAME_MAX: the sandbox's kernel says ENAMETOOLONG → 400, not 500.
    component = "/home/user/" + "b" * 300
    assert sbx.get_file(component).status_code == 400
    _rpc_error(
        sbx.rpc("filesystem.Filesystem/MakeDir", {"path": component}), "invalid_argument", 400
    )


def test_VAL_02_percent_encoding_is_decoded_once(sbx: SandboxHttp) -> None:
    # Decoded once: "../../../etc/passwd" relative to the home, i.e. the sandbox's own file.
    once = sbx.get_file_raw_query("path=..%2f..%2f..%2fetc%2fpasswd")
    assert once.status_code == 200 and once.content == sbx.sh("cat /etc/passwd").encode()
    # Double-encoded: a literal name "%2e%2e%2fetc%2fpasswd" in the home, which does not exist.
    twice = sbx.get_file_raw_query("path=%252e%252e%252fetc%252fpasswd")
    assert twice.status_code == 404, twice.text
    # A literal "%2e" file name is still usable.
    assert sbx.put_file("/home/user/%2e.txt", b"literal").status_code == 200
    assert sbx.get_file_raw_query("path=/home/user/%252e.txt").content == b"literal"
    assert sbx.sh("cat '/home/user/%2e.txt'") == "literal"


def test_VAL_04_unicode_lookalikes_are_literal_names(sbx: SandboxHttp) -> None:
    for name in ("\uff0e\uff0e\uff0fx", "\u2024\u2024", "caf\u00e9", "cafe\u0301", "\u202etxt.exe"):
        path = f"/home/user/val04/{name}"
        assert sbx.put_file(path, name.encode()).status_code == 200, name
        assert sbx.get_file(path).content == name.encode(), name
    listed = sbx.rpc("filesystem.Filesystem/ListDir", {"path": "/home/user/val04"})
    names = {e["name"] for e in listed.json()["entries"]}
    assert {"caf\u00e9", "cafe\u0301"} <= names, "NFC and NFD spellings must stay distinct"
    assert sbx.sh("ls /home/user | grep -c val04") == "1\n"


def test_VAL_05_windows_forms_are_literal(sbx: SandboxHttp) -> None:
    for name in ("..\\..\\etc\\passwd", "C:\\x", "\\\\?\\x"):
        path = f"/home/user/val05/{name}"
        assert sbx.put_file(path, b"win").status_code == 200, name
        assert sbx.get_file(path).content == b"win"
    assert sbx.sh("ls -A /home/user/val05 | wc -l") == "3\n"


def test_VAL_07_control_characters_in_names_and_envs(sbx: SandboxHttp) -> None:
    path = "/home/user/val07/a\nb\x1b[31mc"
    assert sbx.put_file(path, b"ctl").status_code == 200
    assert sbx.get_file(path).content == b"ctl"
    result = sbx.start('printf %s "$X"', envs={"X": "line1\nline2\x1b[0m"})
    assert result.stdout == b"line1\nline2\x1b[0m", result


def test_VAL_08_runtime_spec_fields(sbx: SandboxHttp) -> None:
    for envs in ({"A=B": "x"}, {"A\u0000": "x"}, {"": "x"}):
        result = sbx.start("true", envs=envs)
        assert result.status == 200 and result.end_error is not None, (envs, result)
        assert result.end_error["code"] == "invalid_argument", result.end_error
        assert result.end is None, "the process must not have run"
    for timeout in ("-1", "1e308", "NaN", "abc"):
        result = sbx.start("echo ran", headers={"connect-timeout-ms": timeout})
        assert result.end_error is not None, (timeout, result)
        assert result.end_error["code"] == "invalid_argument", (timeout, result.end_error)
        assert result.stdout == b"", timeout
    for user in ("0", "nosuchuser", "../root"):
        result = sbx.start("id -u", user=user)
        assert result.end_error is not None and result.stdout == b"", (user, result)
        assert result.end_error["code"] in ("invalid_argument", "unauthenticated"), result


def test_ESC_13_proc_cwd_is_rejected_before_running(sbx: SandboxHttp) -> None:
    sbx.sh("ln -sfn /proc/self/fd/7 /home/user/fdlink")
    cwds = [f"/proc/self/fd/{n}" for n in range(3, 21)]
    cwds += ["/proc/1/root", "/proc/self/cwd", "/proc/../proc/1/cwd", "/home/user/fdlink"]
    for cwd in cwds:
        result = sbx.start("ls ../../../; pwd", cwd=cwd)
        assert result.status == 200 and result.end_error is not None, (cwd, result)
        assert result.end_error["code"] == "invalid_argument", (cwd, result.end_error)
        assert "invalid_cwd" in result.end_error["message"], result.end_error
        assert result.stdout == b"" and result.end is None, cwd
    assert sbx.start("pwd", cwd="/tmp").stdout == b"/tmp\n"


def test_VAL_10_gzip_bomb_upload_is_bounded(sbx: SandboxHttp, small_disk_sbx: SandboxHttp) -> None:
    """256 MiB of zeros gzipped to ~250 KiB, into a 64 MiB disk: inflated as a stream and
    stopped by the disk (507), with no partial file left."""
    bomb = gzip.compress(b"\0" * (256 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 1024 * 1024
    response = small_disk_sbx.put_file("/tmp/bomb", bomb, headers={"content-encoding": "gzip"})
    assert response.status_code == 507, response.text
    assert small_disk_sbx.sh("ls -A /tmp | grep -c bomb || true") == "0\n"
    broken = sbx.put_file("/tmp/not-gzip", b"plain", headers={"content-encoding": "gzip"})
    assert broken.status_code == 400, broken.text
    odd = sbx.put_file("/tmp/x", b"x", headers={"content-encoding": "br"})
    assert odd.status_code == 400, odd.text
    wrong_type = sbx.http.post(
        f"{sbx.url}/filesystem.Filesystem/Stat",
        content=b"path=/",
        headers={**sbx.headers, "content-type": "application/x-www-form-urlencoded"},
    )
    assert wrong_type.status_code in (400, 415, 501), wrong_type.text
    assert wrong_type.json()["code"] in ("invalid_argument", "unimplemented")


def test_VAL_11_multipart_filename_is_a_path_inside_the_sandbox(sbx: SandboxHttp) -> None:
    marker = f"sg-val11-{secrets.token_hex(4)}"
    response = sbx.http.post(
        f"{sbx.url}/files",
        files={"file": (f"../../etc/cron.d/{marker}", b"* * * * * root id\n")},
        headers=sbx.headers,
    )
    # As the default user: /etc/cron.d is not writable inside the sandbox.
    assert response.status_code in (400, 403, 404), response.text
    assert not Path(f"/etc/cron.d/{marker}").exists(), "an upload reached the host"
    assert "cannot" in sbx.sh(f"ls /etc/cron.d/{marker} 2>&1 || true")
