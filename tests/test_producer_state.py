"""storage/producer_state.py: one ProducerStateManager for append (snapshots), repair and index
rebuilds (the .txnindex), with None in memory and -1 on disk for "no open transaction"."""

from __future__ import annotations

from kltool.format import parse_header
from kltool.format.batch import build_end_txn_marker
from kltool.format.snapshot import ProducerEntry, parse_snapshot
from kltool.storage import index_builder
from kltool.storage.change import segscan
from kltool.storage.producer_state import ProducerStateManager, control_of
from kltool.storage.write import writer

from .test_index_builder import v2


def test_one_producer_state_for_append_repair_and_the_txn_index():
    assert writer.ProducerState is ProducerStateManager
    assert issubclass(index_builder.TxnIndexBuilder, ProducerStateManager)
    assert isinstance(segscan.Ctx({7: 40}).txn, ProducerStateManager)
    assert segscan.Ctx({7: 40}).txn.open_txns == {7: 40}


def test_snapshot_entries_round_trip_with_none_for_no_open_transaction():
    entries = [ProducerEntry(7, 1, 4, 20, 4, 1000, -1, -1), ProducerEntry(9, 0, 0, 30, 0, 2000, 3, 30)]
    st = ProducerStateManager(entries)
    assert st.get(7).current_txn_first_offset is None and st.get(9).current_txn_first_offset == 30
    assert st.open_txns == {9: 30}
    assert st.entries() == entries
    assert parse_snapshot(st.snapshot_bytes()).entries == entries


def test_one_pass_keeps_sequences_snapshot_fields_and_aborted_transactions():
    kw = dict(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    batches = [
        v2(0, [100, 101], **kw),
        v2(2, [102], producer_id=6, producer_epoch=0, base_sequence=0, is_transactional=True),
        build_end_txn_marker(offset=3, commit=False, producer_id=5, producer_epoch=0, coordinator_epoch=4,
                             timestamp=103),
        v2(4, [104], producer_id=5, producer_epoch=1, base_sequence=0),  # a new epoch
    ]
    st = ProducerStateManager()
    out = [st.update(parse_header(b, 0), control_of(b, parse_header(b, 0)) if i == 2 else None)
           for i, b in enumerate(batches)]
    aborted = out[2]
    # LSO: producer 6's transaction (first offset 2) is still open
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset, aborted.last_stable_offset) == (5, 0, 3, 2)
    p5 = st.get(5)
    assert (p5.epoch, p5.last_sequence, p5.last_offset, p5.coordinator_epoch, p5.current_txn_first_offset) == \
        (1, 0, 4, 4, None)
    assert st.open_txns == {6: 2}
    assert st.take() == [aborted] and st.take() == []
    assert [e.current_txn_first_offset for e in st.entries()] == [-1, 2]
