"""A directory named as a segment's file (``N.timeindex``; adversary campaign ``dir_as_file``, seed 808 run 50):
the broker's loader cannot open it (the log dir goes offline) and verify reports it unreadable; repair, which
moves only regular files, used to plan nothing for it and exit 0 ("repaired") over it. It now reports it as an
error it does not repair (exit 1), and changes nothing else for it."""

from __future__ import annotations

import shutil

from kltool.format import names as fn

from .conftest import ORACLE, run_kltool


def test_a_directory_in_place_of_a_time_index_is_an_error_repair_leaves(tmp_path):
    part = tmp_path / "logs" / "v0-none-0"
    part.mkdir(parents=True)
    shutil.copyfile(ORACLE / "v0-none-0" / fn.segment_file(0, "log"), part / fn.segment_file(0, "log"))
    assert run_kltool("verify", "--repair", "--backup-dir", tmp_path / "bk0", part).code == 0  # its .index
    (part / fn.segment_file(0, "timeindex")).mkdir()
    r = run_kltool("verify", "--repair", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 1, (r.out, r.err)
    assert "unreadable" in r.out and fn.segment_file(0, "timeindex") in r.out, r.out
    assert (part / fn.segment_file(0, "timeindex")).is_dir()
