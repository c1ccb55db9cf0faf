"""The README's `rd/data` examples (create, append, repair, offsets) run as written: from a fresh
directory holding only `fixtures/orders.jsonl` (which the repository ships), in the order a reader
follows them (the log dir is built in "Write", damaged as the "Repair" section says, repaired, then
queried), each printing what the README shows (times, the random topic id and the backup's path aside)."""

from __future__ import annotations

import re
import shlex
import shutil

from .conftest import FIXTURES, ROOT


def _rd_blocks() -> list[list[tuple[str, str]]]:
    text = (ROOT / "README.md").read_text()
    blocks = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        cmds, cmd, lines = [], None, []
        for ln in block.splitlines() + ["$ "]:
            if ln.startswith("$ "):
                if cmd is not None:
                    cmds.append((cmd, "\n".join(lines)))
                cmd, lines = ln[2:], []
            else:
                lines.append(ln)
        if any(" rd/" in c for c, _o in cmds):
            blocks.append(cmds)
    return blocks


def _normal(s: str, tmp) -> str:
    s = s.replace(str(tmp), "/tmp")
    s = re.sub(r"in \d+\.\d+s", "in Xs", s)
    s = re.sub(r"; \d+\.\d+s", "; Xs", s)
    s = re.sub(r"topic id [A-Za-z0-9_-]{22}", "topic id X", s)
    s = re.sub(r"repair-\d{8}T\d{6}-\d+-\d+", "repair-X", s)
    return s.rstrip("\n")


def test_readme_rd_examples_run(kl, tmp_path, monkeypatch):
    blocks = _rd_blocks()
    first = {b[0][0].split()[1]: b for b in blocks}  # create / verify / offsets
    assert set(first) == {"create", "verify", "offsets"}, list(first)
    (tmp_path / "fixtures").mkdir()
    shutil.copy(FIXTURES / "orders.jsonl", tmp_path / "fixtures" / "orders.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)
    readme = (ROOT / "README.md").read_text()
    damage = re.search(r'`python3 -c "(.*?)"`', readme, re.S).group(1).replace("\n", " ")

    def run(block):
        for cmd, expected in block:
            args = shlex.split(cmd)
            assert args[0] == "kltool", cmd
            r = kl(*args[1:])
            assert r.code in (0, 1), (cmd, r)
            assert _normal(r.out, tmp_path) == _normal(expected, tmp_path), f"README out of date: {cmd}\n{r.out}"

    run(first["create"])
    exec(damage, {})  # the damage the README describes, as it says
    run(first["verify"])
    run(first["offsets"])
