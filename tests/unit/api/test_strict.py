"""The HTTP edge's strict parsing of request targets, query values and ports (pure logic; the
same rules are proven end to end in tests/security/test_strict_input.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sandgate.api.routing import parse_port
from sandgate.api.strict import check_target, decimal, is_json_body, parse_query
from sandgate.errors import InvalidRequest, InvalidUrlEncoding


def _scope(path: bytes, query: bytes = b"", headers: Any = ()) -> dict[str, Any]:
    return {
        "raw_path": path,
        "path": path.decode("latin-1"),
        "query_string": query,
        "headers": headers,
    }


@pytest.mark.parametrize(
    ("path", "query"),
    [
        (b"/files", b"path=%2"),
        (b"/files", b"path=%zz"),
        (b"/files", b"path=%c0%ae"),  # overlong "."
        (b"/files", b"path=%e0%80%af"),  # overlong "/"
        (b"/files", b"path=%ed%a0%80"),  # a surrogate
        (b"/files", b"path=%ff"),
        (b"/files", b"path=%f4%90%80%80"),  # beyond U+10FFFF
        (b"/files", b"path=caf\xc3\xa9"),  # raw bytes, not percent-encoded
        (b"/sandboxes/%zz", b""),
        (b"/sandboxes/abc%", b""),
        (b"/sandboxes/%C0%AF", b""),
    ],
)
def test_strict_percent_encoding_refused(path: bytes, query: bytes) -> None:
    with pytest.raises(InvalidUrlEncoding):
        check_target(_scope(path, query))


@pytest.mark.parametrize(
    ("path", "query"),
    [
        (b"/files", b"path=..%2f..%2fetc%2fpasswd"),
        (b"/files", b"path=%252e%252e%252f"),  # decoded once: a literal "%2e%2e%2f"
        (b"/files", b"path=caf%C3%A9&username=user"),
        (b"/files", b"path=a%00b"),  # NUL is the handler's invalid_path, not an encoding error
        (b"/v2/sandboxes", b"state=running&state=paused"),
        (b"/v2/sandboxes", b"metadata=k%3Dv%26x%3D%25zz"),  # checked again when parsed
    ],
)
def test_strict_valid_targets_pass(path: bytes, query: bytes) -> None:
    check_target(_scope(path, query))


def test_strict_repeated_query_key_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="more than once"):
        check_target(_scope(b"/files", b"path=/a&path=/b"))


def test_strict_nested_query_is_decoded_strictly() -> None:
    assert parse_query("k=v&x=caf%C3%A9&e=") == [("k", "v"), ("x", "café"), ("e", "")]
    for bad in ("k=%zz", "k=%c0%ae", "k=%ed%a0%80", "k=%"):
        with pytest.raises(InvalidUrlEncoding):
            parse_query(bad)


@pytest.mark.parametrize(
    ("text", "port"),
    [("1", 1), ("80", 80), ("49983", 49983), ("65535", 65535)],
)
def test_strict_port_range_accepts_canonical_ports(text: str, port: int) -> None:
    assert parse_port(text) == port


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "65536",
        "99999",
        "-1",
        "+80",
        "080",
        " 80",
        "80 ",
        "80\n",
        "8_0",
        "0x50",
        "\u00b2",
        "٨٠",
        "9" * 5000,
        "",
    ],
)
def test_strict_port_range_refuses_everything_else(text: str) -> None:
    assert parse_port(text) is None


@pytest.mark.parametrize(
    ("text", "value"), [("0", 0), ("10", 10), ("-3", -3), ("9223372036854775807", 2**63 - 1)]
)
def test_strict_query_integers_are_canonical_decimals(text: str, value: int) -> None:
    assert decimal(text) == value


@pytest.mark.parametrize(
    "text", ["+10", " 10", "10\n", "010", "1_0", "1.0", "1e1", "٣", "-0", "9" * 20, ""]
)
def test_strict_query_integers_refuse_lenient_forms(text: str) -> None:
    with pytest.raises(ValueError):
        decimal(text)


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        (None, True),
        (b"application/json", True),
        (b"application/json; charset=utf-8", True),
        (b"application/vnd.api+json", True),
        (b"text/plain", False),
        (b"multipart/form-data; boundary=x", False),
        (b"application/octet-stream", False),
    ],
)
def test_strict_json_bodies_are_those_fastapi_would_parse(
    content_type: bytes | None, json: bool
) -> None:
    headers = [] if content_type is None else [(b"content-type", content_type)]
    assert is_json_body(_scope(b"/", headers=headers)) is json
