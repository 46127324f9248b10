"""Version arithmetic behind the runtime floors: upstream releases with pre-releases, the
forms distributions give them, kernel releases with local suffixes, and dpkg ordering."""

from __future__ import annotations

import pytest

from sandgate.runtimes._versions import (
    Version,
    dpkg_compare,
    parse_version,
    same_security_series,
)


@pytest.mark.parametrize(
    ("text", "release", "pre"),
    [
        ("1.2.8", (1, 2, 8), None),
        ("v1.1.12", (1, 1, 12), None),
        ("1.4.0-rc.3", (1, 4, 0), (2, 3)),
        ("1.4.0-rc3", (1, 4, 0), (2, 3)),
        ("1.4.0~rc3+ds1-1", (1, 4, 0), (2, 3)),
        ("1.0.0-rc95", (1, 0, 0), (2, 95)),
        ("1.5.0-beta.1", (1, 5, 0), (1, 1)),
        ("1.1.5+ds1", (1, 1, 5), None),
        ("1.1.5+ds1-1+deb12u1", (1, 1, 5), None),
        ("1.6.20~ds1", (1, 6, 20), None),  # a repack marker, not a pre-release
        ("20.10.24+dfsg1-1+deb12u1+b6", (20, 10, 24), None),
        ("5:28.2.2-1~debian.12~bookworm", (28, 2, 2), None),
        ("6.18.44-fc-v669", (6, 18, 44), None),
        ("5.15.0-105-generic", (5, 15, 0), None),
        ("6.1.0-18-amd64", (6, 1, 0), None),  # "-amd64" is a flavour, not an alpha
        ("5.17", (5, 17), None),
    ],
)
def test_upstream_versions_parse_from_every_form(
    text: str, release: tuple[int, ...], pre: tuple[int, int] | None
) -> None:
    assert parse_version(text) == Version(release, pre)


@pytest.mark.parametrize("text", ["", "unknown", "dev", "-1.2"])
def test_text_without_a_leading_number_has_no_version(text: str) -> None:
    assert parse_version(text) is None


def test_prereleases_sort_before_their_release_and_by_number() -> None:
    ordered = ["1.4.0-alpha.1", "1.4.0-beta.2", "1.4.0-rc.2", "1.4.0-rc.3", "1.4.0", "1.4.1"]
    versions = [parse_version(text) for text in ordered]
    assert versions == sorted(versions)  # type: ignore[type-var]
    assert len(set(versions)) == len(versions)


def test_missing_components_count_as_zero() -> None:
    assert parse_version("5.17") == parse_version("5.17.0")
    assert parse_version("5.17") < parse_version("5.17.1")  # type: ignore[operator]
    assert parse_version("5.17-rc6") < parse_version("5.17")  # type: ignore[operator]


def test_branch_is_major_minor() -> None:
    assert parse_version("6.1.76-1").branch == (6, 1)  # type: ignore[union-attr]
    assert parse_version("29").branch == (29, 0)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("left", "right", "sign"),
    [
        ("1.1.5+ds1-1+deb12u1", "1.1.5+ds1-1+deb12u2", -1),
        ("20.10.24+dfsg1-1+deb12u1+b6", "20.10.24+dfsg1-1+deb12u1", 1),
        ("1.0~rc1-1", "1.0-1", -1),
        ("1.0-1", "1.0-1", 0),
        ("1:0.9-1", "2.0-1", 1),
        ("1.1.15+ds1-2+deb13u1", "1.1.15+ds1-2", 1),
        ("1.2.10", "1.2.9", 1),
        ("1.2a", "1.2+", -1),  # letters sort before other symbols
    ],
)
def test_dpkg_ordering(left: str, right: str, sign: int) -> None:
    result = dpkg_compare(left, right)
    assert (result > 0) - (result < 0) == sign
    reverse = dpkg_compare(right, left)
    assert (reverse > 0) - (reverse < 0) == -sign


@pytest.mark.parametrize(
    ("found", "listed", "matches"),
    [
        ("1.1.5+ds1-1+deb12u1", "1.1.5+ds1-1+deb12u1", True),
        ("1.1.5+ds1-1+deb12u2", "1.1.5+ds1-1+deb12u1", True),  # a later security update
        ("20.10.24+dfsg1-1+deb12u1+b6", "20.10.24+dfsg1-1+deb12u1", True),  # a rebuild
        ("1.1.5+ds1-1", "1.1.5+ds1-1+deb12u1", False),  # before the security update
        ("1.1.5+ds1-2", "1.1.5+ds1-1+deb12u1", False),  # another series, even if "newer"
        ("1.1.5+ds1-1+deb11u3", "1.1.5+ds1-1+deb12u1", False),  # another suite
        ("1.1.12-0ubuntu2~22.04.2", "1.1.12-0ubuntu2~22.04.1", False),  # Ubuntu: exact only
        ("1.1.12-0ubuntu2~22.04.1", "1.1.12-0ubuntu2~22.04.1", True),
    ],
)
def test_allow_list_matches_exact_builds_and_later_debian_security_updates(
    found: str, listed: str, matches: bool
) -> None:
    assert same_security_series(found, listed) is matches
