"""Context options of ``POST /contexts``: who the kernel runs as and where it starts."""

from __future__ import annotations

import os
import pwd

import pytest

from sandgate.interpreter._options import context_cwd, context_user


def test_the_servers_own_user_needs_no_sudo_and_an_unknown_one_is_refused() -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert context_user(None) is None
    assert context_user("") is None
    assert context_user(me) is None
    with pytest.raises(ValueError, match="'no-such-user' does not exist in this sandbox"):
        context_user("no-such-user")


def test_another_existing_user_is_kept_for_sudo() -> None:
    other = next(p.pw_name for p in pwd.getpwall() if p.pw_uid != os.geteuid())
    assert context_user(other) == other


def test_cwd_defaults_to_home_user_and_relative_paths_start_at_the_users_home() -> None:
    home = os.path.expanduser("~")
    assert context_cwd(None, None) == "/home/user"
    assert context_cwd("/tmp/x/../y", None) == "/tmp/y"
    assert context_cwd("~", None) == home
    assert context_cwd("~/work", None) == os.path.join(home, "work")
    assert context_cwd("work", None) == os.path.join(home, "work")
    root_home = pwd.getpwnam("root").pw_dir
    assert context_cwd("~/w", "root") == os.path.join(root_home, "w")
