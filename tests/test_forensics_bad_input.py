"""transactions, producers and diff on damaged copies: random damage to every file of a partition and of
its log dir (segments, indexes, snapshots, .txnindex, checkpoints, partition.metadata) gives findings or
one line on stderr, never a traceback or an internal error (exit 70)."""

from __future__ import annotations

import random
import shutil

import pytest

from .conftest import run_kltool
from .test_transactions import scenario


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    base = tmp_path_factory.mktemp("orig")
    scenario(base, segment_bytes=400, close_snapshot=False)
    (base / "logs" / "replication-offset-checkpoint").write_text("0\n1\nt 0 15\n")
    return base / "logs"


def _damage(rnd: random.Random, f) -> None:
    data = bytearray(f.read_bytes())
    op = rnd.random()
    if not data or op < 0.2:
        f.write_bytes(bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 40))))
    elif op < 0.5:
        f.write_bytes(bytes(data[:rnd.randrange(len(data))]))
    else:
        for _ in range(rnd.randint(1, 4)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        f.write_bytes(bytes(data))


@pytest.mark.parametrize("seed", range(20))
def test_damaged_files_never_give_a_traceback(original, tmp_path, seed):
    rnd = random.Random(seed)
    ld = tmp_path / "logs"
    shutil.copytree(original, ld)
    p = ld / "t-0"
    files = sorted(p.iterdir()) + sorted(f for f in ld.iterdir() if f.is_file())
    for _ in range(rnd.randint(1, 3)):
        _damage(rnd, rnd.choice(files))
    for args in (("transactions", p, "--now", "0"), ("--json", "producers", p, "--scan-all"),
                 ("transactions", ld, "--scan-all", "--now", "0", "--aborted"), ("diff", original / "t-0", p),
                 ("--json", "diff", ld, original)):
        r = run_kltool(*args)
        assert r.code in (0, 1, 2), (args, r)
        assert "Traceback" not in r.err and "internal error" not in r.err, (args, r)
        if r.code == 2:
            assert len(r.err.strip().splitlines()) == 1 and "kltool: error:" in r.err, (args, r)
