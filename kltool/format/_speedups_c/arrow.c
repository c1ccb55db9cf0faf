/*
 * arrow.c: the records level of the Spark data source (kltool.spark): the records of checked v2
 * batches appended straight into Arrow column buffers (bytearrays), for a run of batches the walker
 * checked (arrow_v2: plain ones, and compressed ones decompressed by a Python callable, the codec
 * libraries' C) or for one batch already decoded (arrow_records).
 */
#include "speedups.h"

/* ------------------------------------------------------------------------------------------
 * arrow_v2(buf, i, j, lo, hi, include_control, limit_rows, limit_bytes, rows, nbytes, outs[, inflate])
 *   -> (i, status, rows, nbytes)
 * The records level of the Spark data source (kltool.spark.datasource) for a run of batches the C
 * walker checked (walk_v2: whole, CRC-valid v2 batches starting at i, i < j): each batch's records,
 * decoded with exactly decode_v2's checks, appended as Arrow column buffers to the bytearrays of
 * ``outs`` (None: column not wanted):
 *   0 offsets int64, 1 timestamps int64 (ms), 2 timestampType int32,
 *   3 key end offsets int32, 4 key bytes, 5 key validity (a byte per row),
 *   6..8 the same for values,
 *   9 headers list end offsets int32, 10 headers validity (a byte per row),
 *   11 header key end offsets int32, 12 header key bytes,
 *   13 header value end offsets int32, 14 header value bytes, 15 header value validity.
 * Offsets into bytes continue from the bytearray's current length. Rows are the records whose
 * offset is in [lo, hi) (None: unbounded), as the Python loop filters them; batches are passed over
 * as it does (control batches without include_control, batches wholly below lo, empty ones).
 * status: 0 the batches up to j are done; 1 the chunk is full (``rows`` >= limit_rows or ``nbytes``
 * >= limit_bytes after the batch before i); 2 the batch at i needs Python (compressed without
 * ``inflate``, a control batch to return, malformed records, out-of-int64 values: the reference
 * decoder decides, nothing of it was appended); 3 the batch at i starts at or past hi (the read is over).
 *
 * inflate (optional, None: compressed batches are Python's): ``inflate(codec, payload, count)`` gives
 * the decompressed records of a compressed batch (its payload as bytes: codec 1..4, count > 0 records
 * declared) as a bytes-like object, or None to leave the batch to Python (too large to hold whole,
 * undecodable: the reference path streams it, or says how it is damaged); its exceptions propagate
 * (a missing codec library). The records it gives are parsed as a plain batch's, and must take
 * exactly its bytes, else the batch is Python's; ``nbytes`` then counts the decompressed bytes (as
 * the Python loop does).
 */
typedef struct { PyObject *ba; char *p; Py_ssize_t len, cap; } gbuf;

#define NOUTS 16

/* Growth by half (and the bytearray's own allocation used as the capacity) keeps the final resize
 * to the filled length from giving memory back (CPython reallocates below half its allocation), so
 * the next call does not grow (and fault in) the buffer again. */
static int gb_reserve(gbuf *g, Py_ssize_t extra) {
    if (g->len + extra <= g->cap) return 0;
    Py_ssize_t ncap = g->len + g->len / 2;
    if (ncap < g->len + extra) ncap = g->len + extra;
    if (ncap < 4096) ncap = 4096;
    if (PyByteArray_Resize(g->ba, ncap) < 0) return -1;
    g->p = PyByteArray_AS_STRING(g->ba);
    g->cap = ncap;
    return 0;
}

static inline void gb_i64(gbuf *g, int64_t v) { memcpy(g->p + g->len, &v, 8); g->len += 8; }
static inline void gb_i32(gbuf *g, int32_t v) { memcpy(g->p + g->len, &v, 4); g->len += 4; }
static inline void gb_u8(gbuf *g, unsigned char v) { g->p[g->len++] = (char)v; }

/* Append bytes (reserving); the end offset (must fit int32) goes to ends. -1 memory, 1 too big */
static int gb_span(gbuf *data, gbuf *ends, const unsigned char *s, Py_ssize_t k) {
    if (data->len + k > INT32_MAX) return 1;
    if (gb_reserve(data, k) < 0 || gb_reserve(ends, 4) < 0) return -1;
    memcpy(data->p + data->len, s, (size_t)k);
    data->len += k;
    gb_i32(ends, (int32_t)data->len);
    return 0;
}

/* None or an int64; 1 when past int64 (Python's loop does it all then), -1 error */
static int opt_bound(PyObject *o, int *has, int64_t *v) {
    *has = o != Py_None;
    if (!*has) return 0;
    int of = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &of);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (of) return 1;
    *v = x;
    return 0;
}

/* One batch's records (payload p[0:n], count records) appended; 0 ok, 1 hand to Python, -1 error */
static int arrow_batch(const unsigned char *p, Py_ssize_t n, int64_t count, int64_t base, int64_t base_ts,
                       int lat, int64_t max_ts, int has_lo, int64_t lo, int has_hi, int64_t hi, gbuf *o,
                       Py_ssize_t *selected) {
    cursor c = {p, n, 0};
    int32_t tt = lat ? 1 : 0;
    Py_ssize_t sel = 0;
    int rc;
    if (count * 7 > (int64_t)n) return 1;  /* a record takes >= 7 bytes: malformed, Python says how */
    static const int width[11] = {8, 8, 4, 4, 0, 1, 4, 0, 1, 4, 1};  /* per row, of the fixed-width outputs */
    for (int k = 0; k < 11; k++)
        if (o[k].ba && width[k] && gb_reserve(&o[k], count * width[k]) < 0) return -1;
    for (int64_t r = 0; r < count; r++) {
        int64_t length, tsd, od, kl, vl, hc;
        if (c.pos >= c.n) return 1;
        if (read_zigzag(&c, 5, &length)) return 1;
        if (length < 0 || length > c.n - c.pos) return 1;
        Py_ssize_t end = c.pos + (Py_ssize_t)length;
        c.pos += 1;
        if (read_zigzag(&c, 10, &tsd) || read_zigzag(&c, 5, &od) || read_zigzag(&c, 5, &kl)) return 1;
        Py_ssize_t ks = -1, vs = -1;
        if (kl >= 0) {
            if (kl > c.n - c.pos) return 1;
            ks = c.pos; c.pos += (Py_ssize_t)kl;
        }
        if (read_zigzag(&c, 5, &vl)) return 1;
        if (vl >= 0) {
            if (vl > c.n - c.pos) return 1;
            vs = c.pos; c.pos += (Py_ssize_t)vl;
        }
        if (read_zigzag(&c, 5, &hc)) return 1;
        if (hc != 0 && (hc < 0 || hc > end - c.pos)) return 1;
        Py_ssize_t hstart = c.pos;
        /* headers: checked (and skipped) first; appended below once the row is known to be kept */
        for (int64_t h = 0; h < hc; h++) {
            int64_t hkl, hvl;
            if (read_zigzag(&c, 5, &hkl)) return 1;
            if (hkl < 0 || hkl > c.n - c.pos) return 1;
            c.pos += (Py_ssize_t)hkl;
            if (read_zigzag(&c, 5, &hvl)) return 1;
            if (hvl >= 0) {
                if (hvl > c.n - c.pos) return 1;
                c.pos += (Py_ssize_t)hvl;
            }
        }
        if (c.pos != end) return 1;
        int64_t off, ts;
        if (__builtin_add_overflow(base, od, &off)) return 1;
        if (lat) ts = max_ts;
        else if (__builtin_add_overflow(base_ts, tsd, &ts)) return 1;
        if ((has_lo && off < lo) || (has_hi && off >= hi)) continue;
        sel++;
        if (o[0].ba) gb_i64(&o[0], off);
        if (o[1].ba) gb_i64(&o[1], ts);
        if (o[2].ba) gb_i32(&o[2], tt);
        if (o[3].ba) {
            if (ks >= 0) { if ((rc = gb_span(&o[4], &o[3], p + ks, (Py_ssize_t)kl))) return rc; }
            else gb_i32(&o[3], (int32_t)o[4].len);
            if (gb_reserve(&o[5], 1) < 0) return -1;
            gb_u8(&o[5], ks >= 0);
        }
        if (o[6].ba) {
            if (vs >= 0) { if ((rc = gb_span(&o[7], &o[6], p + vs, (Py_ssize_t)vl))) return rc; }
            else gb_i32(&o[6], (int32_t)o[7].len);
            if (gb_reserve(&o[8], 1) < 0) return -1;
            gb_u8(&o[8], vs >= 0);
        }
        if (o[9].ba) {
            if (gb_reserve(&o[10], 1) < 0) return -1;
            gb_u8(&o[10], hc != 0);
            if (hc) {
                cursor hcur = {p, end, hstart};
                for (int64_t h = 0; h < hc; h++) {
                    int64_t hkl = 0, hvl = -1;  /* checked above: these reads succeed */
                    read_zigzag(&hcur, 5, &hkl);
                    if ((rc = gb_span(&o[12], &o[11], p + hcur.pos, (Py_ssize_t)hkl))) return rc;
                    hcur.pos += (Py_ssize_t)hkl;
                    read_zigzag(&hcur, 5, &hvl);
                    if (gb_reserve(&o[15], 1) < 0) return -1;
                    if (hvl >= 0) {
                        if ((rc = gb_span(&o[14], &o[13], p + hcur.pos, (Py_ssize_t)hvl))) return rc;
                        hcur.pos += (Py_ssize_t)hvl;
                    } else {
                        if (gb_reserve(&o[13], 4) < 0) return -1;
                        gb_i32(&o[13], (int32_t)o[14].len);
                    }
                    gb_u8(&o[15], hvl >= 0);
                }
            }
            gb_i32(&o[9], (int32_t)(o[11].len / 4 - 1));  /* header key ends start with a 0 */
        }
    }
    if (c.pos != c.n) return 1;  /* bytes left after the declared records */
    *selected = sel;
    return 0;
}

/* The 16 outputs (bytearrays or None) as growable buffers; the groups are all there or all None. */
static int outs_open(PyObject *outs, gbuf *o) {
    memset(o, 0, sizeof(gbuf) * NOUTS);
    if (PyTuple_GET_SIZE(outs) != NOUTS) { PyErr_SetString(PyExc_ValueError, "arrow_v2: 16 outputs"); return -1; }
    for (int k = 0; k < NOUTS; k++) {
        PyObject *b = PyTuple_GET_ITEM(outs, k);
        if (b == Py_None) continue;
        if (!PyByteArray_Check(b)) { PyErr_SetString(PyExc_TypeError, "arrow_v2: outputs are bytearrays or None"); return -1; }
        o[k].ba = b;
        o[k].len = PyByteArray_GET_SIZE(b);
        PyByteArrayObject *ba = (PyByteArrayObject *)b;  /* room already allocated (one byte for the NUL) */
        o[k].cap = ba->ob_alloc - 1 - (ba->ob_start - ba->ob_bytes);
        if (o[k].cap < o[k].len) o[k].cap = o[k].len;
        if (o[k].cap > o[k].len && PyByteArray_Resize(b, o[k].cap) < 0) return -1;  /* no realloc: it fits */
        o[k].p = PyByteArray_AS_STRING(b);
    }
    if ((o[3].ba && (!o[4].ba || !o[5].ba)) || (o[6].ba && (!o[7].ba || !o[8].ba)) ||
        (o[9].ba && (!o[10].ba || !o[11].ba || !o[12].ba || !o[13].ba || !o[14].ba || !o[15].ba))) {
        PyErr_SetString(PyExc_ValueError, "arrow_v2: incomplete output group");
        return -1;
    }
    return 0;
}

/* Give each bytearray its filled length back. */
static int outs_close(gbuf *o) {
    int ok = 0;
    for (int k = 0; k < NOUTS; k++)
        if (o[k].ba && PyByteArray_Resize(o[k].ba, o[k].len) < 0) ok = -1;
    return ok;
}

/*
 * arrow_records(data, count, base_offset, base_ts, log_append, max_ts, lo, hi, outs) -> rows or None
 * arrow_v2's appending for one batch's records already decoded by decode_records (``data``: its
 * RecordColumns.buffer, e.g. a decompressed payload): the records with offsets in [lo, hi) appended
 * to ``outs``. None (nothing appended) when it does not take them: the Python loop does.
 */
PyObject *arrow_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long count, base, base_ts, max_ts;
    int lat;
    PyObject *lo_obj, *hi_obj, *outs, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*LLLpLOOO!", &view, &count, &base, &base_ts, &lat, &max_ts, &lo_obj, &hi_obj,
                          &PyTuple_Type, &outs))
        return NULL;
    gbuf o[NOUTS];
    Py_ssize_t saved[NOUTS];
    int has_lo = 0, has_hi = 0, rc = 1, opened = 0;
    int64_t lo = 0, hi = 0;
    Py_ssize_t sel = 0;
    if (outs_open(outs, o) < 0) goto done;
    opened = 1;
    int rlo = opt_bound(lo_obj, &has_lo, &lo), rhi = rlo < 0 ? 0 : opt_bound(hi_obj, &has_hi, &hi);
    if (rlo < 0 || rhi < 0) goto done;
    if (!rlo && !rhi && count > 0) {
        for (int k = 0; k < NOUTS; k++) saved[k] = o[k].len;
        rc = arrow_batch(view.buf, view.len, count, base, base_ts, lat, max_ts, has_lo, lo, has_hi, hi, o, &sel);
        if (rc)  /* roll back: nothing appended */
            for (int k = 0; k < NOUTS; k++) o[k].len = saved[k];
    }
done:
    if (opened && outs_close(o) < 0) rc = -1;
    if (!PyErr_Occurred() && rc >= 0) {
        if (rc == 0) result = PyLong_FromSsize_t(sel);
        else { result = Py_None; Py_INCREF(result); }
    }
    PyBuffer_Release(&view);
    return result;
}

/* A compressed batch's records through inflate(codec, payload, count): 0 appended (*sel rows, *used
 * decompressed bytes), 1 Python's turn (nothing appended), -1 error (inflate's exception). */
static int arrow_inflated(PyObject *inflate, const unsigned char *p, Py_ssize_t total, int codec, int64_t count,
                          int64_t base, int lat, int has_lo, int64_t lo, int has_hi, int64_t hi, gbuf *o,
                          Py_ssize_t *sel, Py_ssize_t *used) {
    PyObject *payload = PyBytes_FromStringAndSize((const char *)p + 61, total - 61);
    if (!payload) return -1;
    PyObject *data = PyObject_CallFunction(inflate, "iOL", codec, payload, (long long)count);
    Py_DECREF(payload);
    if (!data) return -1;
    if (data == Py_None) { Py_DECREF(data); return 1; }
    Py_buffer dv;
    if (PyObject_GetBuffer(data, &dv, PyBUF_SIMPLE) < 0) { Py_DECREF(data); return -1; }
    Py_ssize_t saved[NOUTS];
    for (int k = 0; k < NOUTS; k++) saved[k] = o[k].len;
    int rc = arrow_batch(dv.buf, dv.len, count, base, be64(p + 27), lat, be64(p + 35), has_lo, lo, has_hi, hi, o, sel);
    if (rc)
        for (int k = 0; k < NOUTS; k++) o[k].len = saved[k];
    *used = dv.len;
    PyBuffer_Release(&dv);
    Py_DECREF(data);
    return rc;
}

PyObject *arrow_v2(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t i, j, limit_rows, rows;
    long long limit_bytes, nbytes;
    PyObject *lo_obj, *hi_obj, *outs, *inflate = Py_None;
    int include_control;
    if (!PyArg_ParseTuple(args, "y*nnOOpnLnLO!|O", &view, &i, &j, &lo_obj, &hi_obj, &include_control, &limit_rows,
                          &limit_bytes, &rows, &nbytes, &PyTuple_Type, &outs, &inflate))
        return NULL;
    gbuf o[NOUTS];
    Py_ssize_t saved[NOUTS];
    PyObject *result = NULL;
    int has_lo, has_hi, status = 0, ok = 1;
    int64_t lo = 0, hi = 0;
    if (outs_open(outs, o) < 0) goto done;
    int rlo = opt_bound(lo_obj, &has_lo, &lo), rhi = rlo < 0 ? 0 : opt_bound(hi_obj, &has_hi, &hi);
    if (rlo < 0 || rhi < 0) goto done;
    if (rlo || rhi) j = i;  /* status 2 below */
    const unsigned char *b = view.buf;
    if (j > view.len) j = view.len;
    if (i < 0) i = 0;
    if (i >= j && (rlo || rhi)) status = 2;
    while (i < j) {
        if (view.len - i < 61) { status = 2; break; }
        const unsigned char *p = b + i;
        int32_t size = be32(p + 8);
        Py_ssize_t total = (Py_ssize_t)size + 12;
        if (p[16] != 2 || size < 49 || total > view.len - i) { status = 2; break; }
        int64_t base = be64(p);
        int16_t attrs = be16(p + 21);
        int32_t lod = be32(p + 23);
        int32_t count = be32(p + 57);
        int64_t last;
        if (lod < 0 || __builtin_add_overflow(base, (int64_t)lod, &last)) { status = 2; break; }
        if (attrs & 0x20) {  /* control */
            if (!include_control) { i += total; continue; }
            status = 2; break;
        }
        if (has_lo && last < lo) { i += total; continue; }
        if (has_hi && base >= hi) { status = 3; break; }
        if (attrs & 0x07) {  /* compressed */
            int codec = attrs & 0x07;
            Py_ssize_t sel = 0, used = 0;
            if (inflate == Py_None || codec > 4 || count <= 0) { status = 2; break; }
            int rc = arrow_inflated(inflate, p, total, codec, count, base, (attrs & 0x08) != 0, has_lo, lo, has_hi,
                                    hi, o, &sel, &used);
            if (rc < 0) { ok = 0; break; }
            if (rc) { status = 2; break; }
            i += total;
            if (sel == 0) continue;
            rows += sel;
            nbytes += used;
            if (rows >= limit_rows || nbytes >= limit_bytes) { status = 1; break; }
            continue;
        }
        if (count <= 0) {
            if (count < 0) { status = 2; break; }
            i += total;
            continue;
        }
        for (int k = 0; k < NOUTS; k++) saved[k] = o[k].len;
        Py_ssize_t sel = 0;
        int rc = arrow_batch(p + 61, total - 61, count, base, be64(p + 27), (attrs & 0x08) != 0, be64(p + 35),
                             has_lo, lo, has_hi, hi, o, &sel);
        if (rc) {
            for (int k = 0; k < NOUTS; k++) o[k].len = saved[k];
            if (rc < 0) { ok = 0; break; }
            status = 2; break;
        }
        i += total;
        if (sel == 0) continue;
        rows += sel;
        nbytes += total - 61;
        if (rows >= limit_rows || nbytes >= limit_bytes) { status = 1; break; }
    }
done:
    if (outs_close(o) < 0) ok = 0;
    if (ok && !PyErr_Occurred())
        result = Py_BuildValue("(ninL)", i, status, rows, nbytes);
    PyBuffer_Release(&view);
    return result;
}
