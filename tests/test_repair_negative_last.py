"""The log's last batch with a negative offset field (not covered by the CRC; adversary campaign seed 909 run
50: v2-large-record-0's last batch, 200 records, its baseOffset set to -1). Its last offset (the field plus
its CRC-covered lastOffsetDelta) lands above the batches before it, so the last-batch rule, which restores a
field that went below the log so far only when the whole batch lies below the last one kept, left it alone and
the walk cut all 200 records as out of order. A negative field is damage wherever the last offset lands: the
field is restored right after the log so far (no intact batch lost), verify then finds no error, a second
repair plans nothing, restore gives back every byte."""

from __future__ import annotations

import shutil
import struct

from kltool.format import names as fn
from kltool.format.records import BatchHeader
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path
from kltool.storage.scan import walk

from .conftest import ORACLE
from .test_misnamed_segments import _errors
from .test_repair_dup_copy import _intact
from .test_segment_split import _tree


def test_a_negative_field_on_the_last_batch_is_restored(tmp_path):
    part = tmp_path / "logs" / "v2-large-record-0"
    part.mkdir(parents=True)
    log = part / fn.segment_file(0, "log")
    shutil.copyfile(ORACLE / "v2-large-record-0" / fn.segment_file(0, "log"), log)
    hs = [h for h in walk(log) if isinstance(h, BatchHeader)]
    last = hs[-1]
    assert last.last_offset - last.base_offset > hs[-2].last_offset + 1  # its last offset lands above the log
    data = bytearray(log.read_bytes())
    struct.pack_into(">q", data, last.position, -1)
    log.write_bytes(bytes(data))
    before = _intact(part)
    damaged = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert not [a for a in result.plan.actions if a.op in ("truncate", "excise")], \
        [a.reason for a in result.plan.actions]
    assert _intact(part) == before
    assert struct.unpack_from(">q", log.read_bytes(), last.position)[0] == last.base_offset
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []
    restore(result.manifests[0])
    assert _tree(part) == damaged
