"""Seeding a sandbox's layer never follows a link the image planted (the host runs as root)."""

from __future__ import annotations

import os
from pathlib import Path

from sandgate.runtimes._stage import Seed, _seed

UID = 1_000_065_536


def test_seed_writes_the_file_owned_by_the_sandbox_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    _seed(tmp_path, Seed("etc/hosts", b"127.0.0.1 x\n"), UID)
    _seed(tmp_path, Seed("usr/bin/sudo", b"#!/bin/sh\n", 0o755), UID)
    assert (tmp_path / "etc/hosts").read_bytes() == b"127.0.0.1 x\n"
    sudo = (tmp_path / "usr/bin/sudo").stat()
    assert (sudo.st_uid, sudo.st_mode & 0o7777) == (UID, 0o755)
    assert (tmp_path / "usr").stat().st_uid == UID  # made for it, owned by it


def test_seed_replaces_a_planted_file_link_without_following_it(tmp_path: Path) -> None:
    host = tmp_path / "host-secret"
    host.write_text("host")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.symlink(host, root / "etc" / "hosts")
    _seed(root, Seed("etc/hosts", b"sandbox"), UID)
    assert host.read_text() == "host"
    assert not (root / "etc" / "hosts").is_symlink()
    assert (root / "etc" / "hosts").read_bytes() == b"sandbox"


def test_seed_skips_a_directory_link_on_the_way(tmp_path: Path) -> None:
    host = tmp_path / "host-dir"
    host.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(host, root / "etc")
    _seed(root, Seed("etc/hosts", b"sandbox"), UID)
    assert list(host.iterdir()) == []
