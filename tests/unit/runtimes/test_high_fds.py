"""A gateway holding a few hundred sandboxes has descriptors above 1024: nothing on the create
path may use select(), which refuses them (creates failed with a 500 past ~330 sandboxes)."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

from sandgate.cli.serve import raise_open_file_limit
from sandgate.runtimes.bwrap import _read_child_pid


def test_bubblewrap_info_is_read_from_a_descriptor_above_1024(tmp_path: Path) -> None:
    raise_open_file_limit()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft > 1500, "the soft limit was raised to the hard one"
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 1500)
    os.close(read_end)
    try:
        os.write(write_end, json.dumps({"child-pid": 4242}).encode())
        os.close(write_end)
        assert _read_child_pid(high, tmp_path / "guest.log") == 4242
    finally:
        os.close(high)
