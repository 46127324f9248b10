"""Version arithmetic for runtime floors: upstream releases, kernels and distribution builds.

Three kinds of version string reach the floors, and each is compared by its own rules:

* **Upstream releases** (``1.2.8``, ``1.4.0-rc.3``, ``v1.1.12``, ``27.1.1``) and what a
  distribution keeps of them (``1.1.5+ds1``, ``1.6.20~ds1``, ``20.10.24+dfsg1``): the leading
  dotted numbers, plus a pre-release tag (``-rc.3``, ``~rc3``, ``-rc95``) that sorts before the
  release. Repack markers (``+ds1``, ``~ds1``, ``+dfsg1``) are not pre-releases and are ignored.
* **Kernel releases** (``6.18.44-fc-v669``, ``5.15.0-105-generic``): the same leading numbers;
  the local suffix says nothing about fixes and is ignored (a distribution kernel that
  backports fixes under ``5.15.0`` is judged by its allow-list entry, never by its suffix).
* **Distribution package versions** (``1.1.5+ds1-1+deb12u1``, ``1.1.12-0ubuntu2~22.04.1``):
  ordered by dpkg's rules (Debian Policy §5.6.12), used only to match the allow-list of
  known-patched builds.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["Version", "dpkg_compare", "parse_version", "same_security_series"]

_LEADING = re.compile(r"v?(\d+(?:\.\d+)*)")
#: A pre-release tag right after the numbers: ``-rc.3``, ``~rc3``, ``.rc1``, ``-beta2``.
_PRE = re.compile(r"[-~.]?(alpha|beta|rc)\.?(\d*)(?![a-z])", re.IGNORECASE)
_PRE_RANK = {"alpha": 0, "beta": 1, "rc": 2}
_EPOCH = re.compile(r"^\d+:")
#: A Debian security or stable update: ``+deb12u1`` (optionally followed by a binNMU ``+b6``).
_DEBIAN_SERIES = re.compile(r"^(?P<series>.*\+deb\d+u)(?P<update>\d+)(?P<rest>(?:\+b\d+)?)$")


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """An upstream version: dotted numbers and an optional pre-release ``(rank, number)``."""

    release: tuple[int, ...]
    pre: tuple[int, int] | None = None

    @property
    def branch(self) -> tuple[int, int]:
        """``(major, minor)``: the stable branch a fix is backported to."""
        padded = (*self.release, 0, 0)
        return padded[0], padded[1]

    def _key(self) -> tuple[tuple[int, ...], int, tuple[int, int]]:
        padded = (*self.release, 0, 0, 0, 0)[: max(4, len(self.release))]
        return padded, (1 if self.pre is None else 0), (self.pre or (0, 0))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = ".".join(map(str, self.release))
        if self.pre is not None:
            name = next(k for k, v in _PRE_RANK.items() if v == self.pre[0])
            text += f"-{name}.{self.pre[1]}"
        return text


def parse_version(text: str) -> Version | None:
    """The upstream version at the start of ``text``, or None when it starts with no number.

    An epoch (``5:``) is dropped; a pre-release tag directly after the numbers is kept;
    everything else after them (distribution revision, kernel flavour) is ignored.
    """
    text = _EPOCH.sub("", text.strip())
    match = _LEADING.match(text)
    if match is None:
        return None
    release = tuple(int(part) for part in match.group(1).split("."))
    pre_match = _PRE.match(text, match.end())
    pre = None
    if pre_match is not None:
        pre = (_PRE_RANK[pre_match.group(1).lower()], int(pre_match.group(2) or 0))
    return Version(release, pre)


def dpkg_compare(left: str, right: str) -> int:
    """Negative, zero or positive as ``left`` sorts before, equal to or after ``right`` under
    dpkg's ordering of package versions (epoch, then upstream, then revision)."""
    left_epoch, left_upstream, left_revision = _split_package_version(left)
    right_epoch, right_upstream, right_revision = _split_package_version(right)
    if left_epoch != right_epoch:
        return left_epoch - right_epoch
    return _verrevcmp(left_upstream, right_upstream) or _verrevcmp(left_revision, right_revision)


def same_security_series(found: str, listed: str) -> bool:
    """Whether ``found`` is ``listed`` or a later update of the same Debian security series.

    ``1.1.5+ds1-1+deb12u2`` (and ``...+deb12u1+b6``, a rebuild) continue
    ``1.1.5+ds1-1+deb12u1``: same upstream, same revision, same suite (``deb12``), a later
    update number. Updates within a Debian suite are cumulative, so a later one keeps every fix
    of an earlier one. Any other build must match an entry exactly.
    """
    if found == listed:
        return True
    found_match = _DEBIAN_SERIES.match(found)
    listed_match = _DEBIAN_SERIES.match(listed)
    if found_match is None or listed_match is None:
        return False
    if found_match.group("series") != listed_match.group("series"):
        return False
    return dpkg_compare(found, listed) >= 0


def _split_package_version(text: str) -> tuple[int, str, str]:
    epoch = 0
    if ":" in text:
        head, _, text = text.partition(":")
        epoch = int(head) if head.isdigit() else 0
    upstream, dash, revision = text.rpartition("-")
    if not dash:
        return epoch, text, ""
    return epoch, upstream, revision


def _order(char: str) -> int:
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(left: str, right: str) -> int:
    """dpkg's comparison of one version part: alternating non-digit and digit runs."""
    i = j = 0
    digits = "0123456789"
    while i < len(left) or j < len(right):
        while (i < len(left) and left[i] not in digits) or (
            j < len(right) and right[j] not in digits
        ):
            left_order = _order(left[i]) if i < len(left) and left[i] not in digits else 0
            right_order = _order(right[j]) if j < len(right) and right[j] not in digits else 0
            if left_order != right_order:
                return left_order - right_order
            i += 1
            j += 1
        start_i, start_j = i, j
        while i < len(left) and left[i] in digits:
            i += 1
        while j < len(right) and right[j] in digits:
            j += 1
        left_number = int(left[start_i:i] or 0)
        right_number = int(right[start_j:j] or 0)
        if left_number != right_number:
            return -1 if left_number < right_number else 1
    return 0
