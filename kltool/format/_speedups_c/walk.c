/*
 * walk.c: the batch walker's fast path (kltool.storage.scan): a stretch of plain, valid v2 batches
 * checked in one call (size, magic, CRC-32C, offsets, epochs; with deep, each record's structure).
 * Everything else stops it, and scan.py's Python walker takes over with its exact findings.
 */
#include "speedups.h"

/* The records of an uncompressed v2 payload are exactly what decode_records accepts, their offsets
 * strictly increase within [base, base+lod], and offsets/timestamps stay in int64. */
static int records_ok(const unsigned char *p, Py_ssize_t n, int64_t count, int64_t base, int64_t lod,
                      int64_t base_ts, int lat) {
    if (count == 0) return 1;  /* decode_records returns nothing without reading the payload */
    cursor c = {p, n, 0};
    int64_t prev = -1, tmp;
    for (int64_t i = 0; i < count; i++) {
        rec_t r;
        if (next_record(&c, &r, NULL)) return 0;
        if (r.od <= prev || r.od > lod) return 0;
        prev = r.od;
        if (__builtin_add_overflow(base, r.od, &tmp)) return 0;
        if (!lat && __builtin_add_overflow(base_ts, r.tsd, &tmp)) return 0;
    }
    return c.pos == n;
}

/*
 * walk_v2(buf, start, stop, prev_last, seg_base, deep, want_cols)
 *   -> (index, batches, records, last_offset, cols, tail_index, tail_base, before_tail)
 * Walks the consecutive v2 batches of buf[start:stop] that need nothing from Python: the whole
 * batch is in the window, its size and magic are right, its CRC matches, its offsets follow
 * ``prev_last`` (None: anything >= 0) and lie in [seg_base, seg_base + 2^31-1] (seg_base -1: not
 * checked), last offset delta and count are >= 0, it has the partitionLeaderEpoch of the run's first
 * batch (a new epoch starts a new run), it is not a transactional control batch; with
 * ``deep``, it is uncompressed and its records pass records_ok. Stops before the first batch that
 * is not so (Python's walker handles it, with its exact messages) and returns the index it
 * stopped at. ``cols`` (with want_cols) packs per batch native int64 (index, base, last, max_ts).
 * ``tail_index``, ``tail_base`` (the run's last batch: its index and base offset; -1, -1 for no batch) and
 * ``before_tail`` (the last offset before that batch, None: none) let a caller judge that batch alone.
 */
PyObject *walk_v2(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop;
    PyObject *prev_obj;
    long long seg_base;
    int deep, want_cols;
    if (!PyArg_ParseTuple(args, "y*nnOLpp", &view, &start, &stop, &prev_obj, &seg_base, &deep, &want_cols))
        return NULL;
    int64_t prev = INT64_MIN;
    int have_prev = prev_obj != Py_None;
    if (have_prev) {
        int of = 0;
        prev = PyLong_AsLongLongAndOverflow(prev_obj, &of);
        if (prev == -1 && PyErr_Occurred()) { PyBuffer_Release(&view); return NULL; }
        if (of) start = stop = 0;  /* a last offset past int64 (damaged data): Python's path does it all */
    }
    if (stop > view.len) stop = view.len;
    if (start < 0) start = 0;
    const unsigned char *b = view.buf;
    Py_ssize_t i = start;
    Py_ssize_t nb = 0;
    int64_t records = 0;
    int64_t *cols = NULL;
    Py_ssize_t cap = 0;
    PyObject *result = NULL;
    int32_t run_epoch = 0;
    Py_ssize_t tail_i = -1;
    int64_t tail_base = -1, before = prev;
    int have_before = have_prev;
    Py_BEGIN_ALLOW_THREADS
    while (stop - i >= 61) {
        const unsigned char *p = b + i;
        int64_t base = be64(p);
        int32_t size = be32(p + 8);
        if (p[16] != 2 || size < 49 || (Py_ssize_t)size + 12 > stop - i) break;
        if (nb == 0) run_epoch = be32(p + 12);
        else if (be32(p + 12) != run_epoch) break;  /* a run has one partitionLeaderEpoch (epochs.EpochWatch) */
        Py_ssize_t total = (Py_ssize_t)size + 12;
        int16_t attrs = be16(p + 21);
        int32_t lod = be32(p + 23);
        int64_t pid = be64(p + 43);
        int32_t count = be32(p + 57);
        if (base < 0 || lod < 0 || count < 0 || (int64_t)count > (int64_t)lod + 1) break;  /* batch_rules */
        int64_t last;
        if (__builtin_add_overflow(base, (int64_t)lod, &last)) break;
        if (have_prev && base <= prev) break;
        if (seg_base >= 0 && (base < seg_base || last - seg_base > 0x7FFFFFFF)) break;
        if ((attrs & 0x20) && pid >= 0) break;
        uint32_t stored = (uint32_t)be32(p + 17);
        if (crc32c_update(0, p + 21, (size_t)(total - 21)) != stored) break;
        if (deep) {
            if (attrs & 0x07) break;
            int lat = (attrs & 0x08) != 0;
            if (!records_ok(p + 61, total - 61, count, base, lod, be64(p + 27), lat)) break;
        }
        if (want_cols) {
            if (nb >= cap) {
                Py_ssize_t ncap = cap ? cap * 2 : 1024;
                int64_t *nc = realloc(cols, sizeof(int64_t) * 4 * ncap);
                if (!nc) break;
                cols = nc; cap = ncap;
            }
            int64_t *q = cols + 4 * nb;
            q[0] = i; q[1] = base; q[2] = last; q[3] = be64(p + 35);
        }
        nb++;
        records += count;
        tail_i = i; tail_base = base; before = prev; have_before = have_prev;
        prev = last;
        have_prev = 1;
        i += total;
    }
    Py_END_ALLOW_THREADS
    PyObject *cobj;
    if (want_cols) cobj = PyBytes_FromStringAndSize((const char *)cols, (Py_ssize_t)(nb * 4 * sizeof(int64_t)));
    else { cobj = Py_None; Py_INCREF(cobj); }
    free(cols);
    PyObject *bobj = NULL;
    if (cobj) {
        if (have_before) bobj = PyLong_FromLongLong((long long)before);
        else { bobj = Py_None; Py_INCREF(bobj); }
        if (!bobj) Py_DECREF(cobj);
    }
    if (bobj) {
        if (have_prev)
            result = Py_BuildValue("(nnLLNnLN)", i, nb, (long long)records, (long long)prev, cobj, tail_i,
                                   (long long)tail_base, bobj);
        else
            result = Py_BuildValue("(nnLONnLN)", i, nb, (long long)records, Py_None, cobj, tail_i,
                                   (long long)tail_base, bobj);
    }
    PyBuffer_Release(&view);
    return result;
}
