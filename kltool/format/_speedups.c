/*
 * Optional C accelerator for kltool.format.batch.decode_v2_records.
 *
 * decode_v2(data, count, base_offset, base_ts, lat, max_ts)
 *   -> (offsets, timestamps, key_starts, key_ends, value_starts, value_ends, headers, sizes, pos, ordered)
 * ``ordered`` is true when the offset deltas strictly increase from >= 0.
 * with the same meaning as RecordColumns. On malformed data it raises ValueError(message, rel_pos)
 * where rel_pos is the start of the record being decoded; the caller turns that into CorruptDataError.
 * The pure-Python decoder stays the reference: tests check both give identical results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    Py_ssize_t pos;
} cursor;

/* 0 ok, -1 past the end, -2 too long */
static int read_zigzag(cursor *c, int max_bytes, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0, k = 0;
    Py_ssize_t i = c->pos;
    for (;;) {
        if (i >= c->n || i < 0) return -1;
        unsigned char b = c->p[i++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        k++;
        if (!(b & 0x80)) break;
        shift += 7;
        if (k >= max_bytes) return -2;
    }
    c->pos = i;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

static PyObject *fail(const char *msg, Py_ssize_t rel) {
    PyObject *args = Py_BuildValue("(sn)", msg, rel);
    if (args) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

#define NLISTS 8

static PyObject *decode_v2(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, max_ts;
    int lat;
    if (!PyArg_ParseTuple(args, "y*nLLpL", &view, &count, &base_offset, &base_ts, &lat, &max_ts))
        return NULL;
    PyObject *lists[NLISTS] = {0};
    PyObject *result = NULL;
    if (count < 0) count = 0;
    for (int i = 0; i < NLISTS; i++) {
        lists[i] = PyList_New(0);
        if (!lists[i]) goto done;
    }
    cursor c = {(const unsigned char *)view.buf, view.len, 0};
    int ordered = 1;         /* offset deltas strictly increasing from >= 0 */
    int64_t prev_od = -1;
    const char *err = NULL;
    Py_ssize_t rec_start = 0;
    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t length, tsd, od, kl, vl, hc;
        int rc;
        rec_start = c.pos;
        if (c.pos >= c.n) { err = "Incorrect declared batch size, premature EOF reached"; break; }
        if ((rc = read_zigzag(&c, 5, &length))) { err = rc == -2 ? "Varint is too long" : "Incorrect declared batch size, premature EOF reached"; break; }
        Py_ssize_t end = c.pos + (Py_ssize_t)length;
        if (length < 0) { err = "Invalid record size"; break; }
        if (length > c.n - c.pos) { err = "Incorrect declared batch size, premature EOF reached"; break; }
        c.pos += 1; /* attributes */
        if ((rc = read_zigzag(&c, 10, &tsd))) { err = rc == -2 ? "Varlong is too long" : "Incorrect declared batch size, premature EOF reached"; break; }
        if ((rc = read_zigzag(&c, 5, &od))) { err = rc == -2 ? "Varint is too long" : "Incorrect declared batch size, premature EOF reached"; break; }
        if ((rc = read_zigzag(&c, 5, &kl))) { err = rc == -2 ? "Varint is too long" : "Incorrect declared batch size, premature EOF reached"; break; }
        Py_ssize_t ks = -1, ke = -1, vs = -1, ve = -1;
        if (kl >= 0) {
            if (kl > c.n - c.pos) { err = "Incorrect declared batch size, premature EOF reached"; break; }
            ks = c.pos; c.pos += (Py_ssize_t)kl; ke = c.pos;
        }
        if ((rc = read_zigzag(&c, 5, &vl))) { err = rc == -2 ? "Varint is too long" : "Incorrect declared batch size, premature EOF reached"; break; }
        if (vl >= 0) {
            if (vl > c.n - c.pos) { err = "Incorrect declared batch size, premature EOF reached"; break; }
            vs = c.pos; c.pos += (Py_ssize_t)vl; ve = c.pos;
        }
        if ((rc = read_zigzag(&c, 5, &hc))) { err = rc == -2 ? "Varint is too long" : "Incorrect declared batch size, premature EOF reached"; break; }
        PyObject *hdrs;
        if (hc == 0) {
            hdrs = Py_None;
            Py_INCREF(hdrs);
        } else {
            if (hc < 0 || hc > end - c.pos) { err = "Found invalid number of record headers"; break; }
            hdrs = PyList_New(0);
            if (!hdrs) goto done;
            for (int64_t h = 0; h < hc; h++) {
                int64_t hkl, hvl;
                if ((rc = read_zigzag(&c, 5, &hkl))) { err = rc == -2 ? "Varint is too long" : "Varint runs past the end of the data"; break; }
                if (hkl < 0) { err = "Invalid negative header key size"; break; }
                if (hkl > c.n - c.pos) { err = "Varint runs past the end of the data"; break; }
                Py_ssize_t hks = c.pos;
                c.pos += (Py_ssize_t)hkl;
                if ((rc = read_zigzag(&c, 5, &hvl))) { err = rc == -2 ? "Varint is too long" : "Varint runs past the end of the data"; break; }
                PyObject *t;
                if (hvl < 0) {
                    t = Py_BuildValue("(nnnn)", hks, hks + (Py_ssize_t)hkl, (Py_ssize_t)-1, (Py_ssize_t)-1);
                } else {
                    if (hvl > c.n - c.pos) { err = "Incorrect declared batch size, premature EOF reached"; break; }
                    t = Py_BuildValue("(nnnn)", hks, hks + (Py_ssize_t)hkl, c.pos, c.pos + (Py_ssize_t)hvl);
                    c.pos += (Py_ssize_t)hvl;
                }
                if (!t || PyList_Append(hdrs, t) < 0) { Py_XDECREF(t); Py_DECREF(hdrs); goto done; }
                Py_DECREF(t);
            }
            if (err) { Py_DECREF(hdrs); break; }
        }
        if (c.pos != end) { Py_DECREF(hdrs); err = "Invalid record size: the record's fields do not add up to its length"; break; }
        if (od <= prev_od) ordered = 0;
        prev_od = od;
        long long vals[8];
        if (__builtin_add_overflow(base_offset, (long long)od, &vals[0]) ||
            (!lat && __builtin_add_overflow(base_ts, (long long)tsd, &vals[1]))) {
            Py_DECREF(hdrs);
            PyErr_SetString(PyExc_OverflowError, "offset or timestamp out of int64 range");
            goto done;
        }
        if (lat) vals[1] = max_ts;
        vals[2] = ks; vals[3] = ke; vals[4] = vs; vals[5] = ve;
        vals[7] = end - rec_start;
        for (int i = 0; i < 8; i++) {
            if (i == 6) {
                if (PyList_Append(lists[6], hdrs) < 0) { Py_DECREF(hdrs); goto done; }
                Py_DECREF(hdrs);
                continue;
            }
            PyObject *v = PyLong_FromLongLong(vals[i]);
            if (!v) { if (i < 6) Py_DECREF(hdrs); goto done; }
            int ok = PyList_Append(lists[i], v);
            Py_DECREF(v);
            if (ok < 0) { if (i < 6) Py_DECREF(hdrs); goto done; }
        }
    }
    if (err) {
        fail(err, rec_start);
        goto done;
    }
    result = Py_BuildValue("(OOOOOOOOnO)", lists[0], lists[1], lists[2], lists[3], lists[4], lists[5], lists[6],
                           lists[7], c.pos, ordered ? Py_True : Py_False);
done:
    for (int i = 0; i < NLISTS; i++) Py_XDECREF(lists[i]);
    PyBuffer_Release(&view);
    return result;
}


/* ------------------------------------------------------------------------------------------
 * CRC-32C (Castagnoli): SSE4.2 crc32 instructions when the CPU has them (checked at run time),
 * else a slice-by-8 table. Same convention as the crc32c package: crc32c(data, value=0).
 */
static uint32_t crc_table[8][256];

static void crc_init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) { c = crc_table[0][c & 0xFF] ^ (c >> 8); crc_table[t][i] = c; }
    }
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8); n--; }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
              crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8; n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

/* Multiplying a CRC state by x^(8*CRC_BLK) and x^(16*CRC_BLK) mod P: tables built at start-up, so that the three
 * streams above can be combined. shift_tab[w][k][b]: contribution of byte b at byte k of the state. */
#define CRC_BLK 1024  /* bytes per stream in the three-stream loop */
static uint32_t shift_tab[2][4][256];

static uint32_t crc_shift_slow(uint32_t crc, size_t zeros) {
    /* feeding `zeros` zero bytes to the raw (non-inverted) state */
    unsigned char z[64] = {0};
    while (zeros) {
        size_t k = zeros < 64 ? zeros : 64;
        crc = crc_sw(crc, z, k);
        zeros -= k;
    }
    return crc;
}

static void crc_init_shift(void) {
    /* the shift is linear: the images of the 32 one-bit states give every table entry */
    for (int w = 0; w < 2; w++) {
        size_t zeros = w ? 2 * CRC_BLK : CRC_BLK;
        uint32_t basis[32];
        for (int j = 0; j < 32; j++) basis[j] = crc_shift_slow((uint32_t)1 << j, zeros);
        for (int k = 0; k < 4; k++)
            for (uint32_t b = 0; b < 256; b++) {
                uint32_t v = 0;
                for (int j = 0; j < 8; j++)
                    if (b & (1u << j)) v ^= basis[8 * k + j];
                shift_tab[w][k][b] = v;
            }
    }
}

static uint32_t kl_crc_shift(uint32_t crc, int which) {
    const uint32_t (*t)[256] = shift_tab[which];
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) { c = _mm_crc32_u8((uint32_t)c, *p++); n--; }
    /* three independent streams hide the instruction's latency on large inputs */
    while (n >= 3 * CRC_BLK) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *p1 = p + CRC_BLK, *p2 = p + 2 * CRC_BLK;
        for (int i = 0; i < CRC_BLK; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8); memcpy(&b, p1 + i, 8); memcpy(&d, p2 + i, 8);
            c = _mm_crc32_u64(c, a); c1 = _mm_crc32_u64(c1, b); c2 = _mm_crc32_u64(c2, d);
        }
        /* crc(s, A||B||D) = shift(crc(s, A), 2 BLK) ^ shift(crc(0, B), BLK) ^ crc(0, D) */
        c = kl_crc_shift((uint32_t)c, 1) ^ kl_crc_shift((uint32_t)c1, 0) ^ (uint32_t)c2;
        p += 3 * CRC_BLK; n -= 3 * CRC_BLK;
    }
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = _mm_crc32_u64(c, w); p += 8; n -= 8; }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
static int use_hw_crc = 0;
#else
#define HAVE_HW_CRC 0
#endif

static uint32_t crc32c_update(uint32_t value, const unsigned char *p, size_t n) {
    uint32_t crc = ~value;
#if HAVE_HW_CRC
    if (use_hw_crc) return ~crc_hw(crc, p, n);
#endif
    return ~crc_sw(crc, p, n);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    uint32_t r;
    if (view.len > 4096) {
        Py_BEGIN_ALLOW_THREADS
        r = crc32c_update(value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        r = crc32c_update(value, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

static PyObject *py_crc_hw(PyObject *self, PyObject *args) {
#if HAVE_HW_CRC
    int on = -1;
    if (!PyArg_ParseTuple(args, "|i", &on)) return NULL;
    if (on == 0) use_hw_crc = 0;
    else if (on == 1) use_hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    return PyBool_FromLong(use_hw_crc);
#else
    return PyBool_FromLong(0);
#endif
}

/* ------------------------------------------------------------------------------------------
 * One record of an uncompressed v2 payload, with exactly decode_v2's checks (above): the
 * validator and the formatters use this, decode_v2 keeps its own loop (its equivalence with the
 * pure-Python decoder is tested). Header spans go to a caller-owned array.
 */
typedef struct {
    int64_t tsd, od;
    Py_ssize_t start, end, ks, ke, vs, ve;
    int64_t hc;
} rec_t;

typedef struct {
    Py_ssize_t *h;   /* 4 per header: ks, ke, vs, ve */
    Py_ssize_t cap;  /* in headers */
} hdr_buf;

/* 0 ok; 1 malformed (the reference decoder gives the exact error); -1 memory error */
static int next_record(cursor *c, rec_t *r, hdr_buf *hb) {
    int64_t length, kl, vl, hc;
    r->start = c->pos;
    if (c->pos >= c->n) return 1;
    if (read_zigzag(c, 5, &length)) return 1;
    if (length < 0 || length > c->n - c->pos) return 1;
    Py_ssize_t end = c->pos + (Py_ssize_t)length;
    c->pos += 1;
    if (read_zigzag(c, 10, &r->tsd)) return 1;
    if (read_zigzag(c, 5, &r->od)) return 1;
    if (read_zigzag(c, 5, &kl)) return 1;
    r->ks = r->ke = r->vs = r->ve = -1;
    if (kl >= 0) {
        if (kl > c->n - c->pos) return 1;
        r->ks = c->pos; c->pos += (Py_ssize_t)kl; r->ke = c->pos;
    }
    if (read_zigzag(c, 5, &vl)) return 1;
    if (vl >= 0) {
        if (vl > c->n - c->pos) return 1;
        r->vs = c->pos; c->pos += (Py_ssize_t)vl; r->ve = c->pos;
    }
    if (read_zigzag(c, 5, &hc)) return 1;
    r->hc = 0;
    if (hc != 0) {
        if (hc < 0 || hc > end - c->pos) return 1;
        if (hb) {
            if (hc > hb->cap) {
                Py_ssize_t cap = hc < 16 ? 16 : (Py_ssize_t)hc;
                Py_ssize_t *nh = PyMem_Realloc(hb->h, sizeof(Py_ssize_t) * 4 * cap);
                if (!nh) { PyErr_NoMemory(); return -1; }
                hb->h = nh; hb->cap = cap;
            }
        }
        for (int64_t h = 0; h < hc; h++) {
            int64_t hkl, hvl;
            if (read_zigzag(c, 5, &hkl)) return 1;
            if (hkl < 0 || hkl > c->n - c->pos) return 1;
            Py_ssize_t hks = c->pos;
            c->pos += (Py_ssize_t)hkl;
            if (read_zigzag(c, 5, &hvl)) return 1;
            Py_ssize_t hvs = -1, hve = -1;
            if (hvl >= 0) {
                if (hvl > c->n - c->pos) return 1;
                hvs = c->pos; c->pos += (Py_ssize_t)hvl; hve = c->pos;
            }
            if (hb) {
                Py_ssize_t *q = hb->h + 4 * h;
                q[0] = hks; q[1] = hks + (Py_ssize_t)hkl; q[2] = hvs; q[3] = hve;
            }
        }
        r->hc = hc;
    }
    if (c->pos != end) return 1;
    r->end = end;
    return 0;
}

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

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

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
static PyObject *walk_v2(PyObject *self, PyObject *args) {
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
        if (base < 0 || lod < 0 || count < 0) break;
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

/* ------------------------------------------------------------------------------------------
 * Output of dump --records: kafka-dump-log text lines or JSON lines, for a whole batch in one call.
 */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
} obuf;

static int ob_reserve(obuf *o, Py_ssize_t extra) {
    if (o->n + extra <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->n + extra) cap *= 2;
    char *np = PyMem_Realloc(o->p, cap);
    if (!np) { PyErr_NoMemory(); return -1; }
    o->p = np; o->cap = cap;
    return 0;
}
static inline int ob_put(obuf *o, const char *s, Py_ssize_t k) {
    if (ob_reserve(o, k)) return -1;
    memcpy(o->p + o->n, s, k); o->n += k;
    return 0;
}
#define OB_LIT(o, lit) ob_put((o), (lit), (Py_ssize_t)(sizeof(lit) - 1))
static int ob_i64(obuf *o, int64_t v) {
    char tmp[24];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (ob_reserve(o, k + 1)) return -1;
    if (v < 0) o->p[o->n++] = '-';
    while (k) o->p[o->n++] = tmp[--k];
    return 0;
}
static const char HEXD[] = "0123456789abcdef";
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static int ob_hex(obuf *o, const unsigned char *s, Py_ssize_t k) {
    if (ob_reserve(o, 2 * k)) return -1;
    char *d = o->p + o->n;
    for (Py_ssize_t i = 0; i < k; i++) { d[2 * i] = HEXD[s[i] >> 4]; d[2 * i + 1] = HEXD[s[i] & 15]; }
    o->n += 2 * k;
    return 0;
}
static int ob_b64(obuf *o, const unsigned char *s, Py_ssize_t k) {
    if (ob_reserve(o, 4 * ((k + 2) / 3))) return -1;
    char *d = o->p + o->n;
    Py_ssize_t i = 0;
    for (; i + 3 <= k; i += 3) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        *d++ = B64[v >> 18]; *d++ = B64[(v >> 12) & 63]; *d++ = B64[(v >> 6) & 63]; *d++ = B64[v & 63];
    }
    if (k - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *d++ = B64[v >> 18]; *d++ = B64[(v >> 12) & 63]; *d++ = '='; *d++ = '=';
    } else if (k - i == 2) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
        *d++ = B64[v >> 18]; *d++ = B64[(v >> 12) & 63]; *d++ = B64[(v >> 6) & 63]; *d++ = '=';
    }
    o->n = d - o->p;
    return 0;
}

/* Strict UTF-8 (what bytes.decode("utf-8") accepts). */
static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (!(w & 0x8080808080808080ULL)) { i += 8; continue; }
            }
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0;
            if (c == 0xED && c1 >= 0xA0) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
            if (c == 0xF0 && c1 < 0x90) return 0;
            if (c == 0xF4 && c1 >= 0x90) return 0;
            i += 4;
        } else return 0;
    }
    return 1;
}

enum { ENC_TEXT = 0, ENC_BASE64 = 1, ENC_HEX = 2 };

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* bytes of w below n (n <= 128) / above n, as high bits */
#define HAS_LESS(w, n) (((w) - ONES * (n)) & ~(w) & HIGHS)
#define HAS_MORE(w, n) ((((w) + ONES * (127 - (n))) | (w)) & HIGHS)
#define HAS_BYTE(w, b) HAS_LESS((w) ^ (ONES * (b)), 1)

/* text_bytes(): 1 = the Python formatter must do it (non-ASCII or unprintable text) */
static int text_value(obuf *o, const unsigned char *s, Py_ssize_t k, int enc) {
    if (enc == ENC_HEX) return ob_hex(o, s, k);
    if (enc == ENC_BASE64) return ob_b64(o, s, k);
    Py_ssize_t i = 0;
    for (; i + 8 <= k; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (HAS_LESS(w, 0x20) | HAS_MORE(w, 0x7E)) return 1;
    }
    for (; i < k; i++)
        if (s[i] < 0x20 || s[i] > 0x7E) return 1;
    return ob_put(o, (const char *)s, k);
}

/* encode_bytes() as JSON (ensure_ascii=False) */
static int json_value(obuf *o, const unsigned char *s, Py_ssize_t k, int enc) {
    if (enc == ENC_HEX) {
        if (OB_LIT(o, "{\"hex\":\"") || ob_hex(o, s, k) || OB_LIT(o, "\"}")) return -1;
        return 0;
    }
    if (enc == ENC_BASE64 || !utf8_valid(s, k)) {
        if (OB_LIT(o, "{\"base64\":\"") || ob_b64(o, s, k) || OB_LIT(o, "\"}")) return -1;
        return 0;
    }
    if (ob_reserve(o, 6 * k + 2)) return -1;
    char *d = o->p + o->n;
    *d++ = '"';
    Py_ssize_t i = 0;
    while (i < k) {
        if (i + 8 <= k) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            uint64_t m = HAS_LESS(w, 0x20) | HAS_BYTE(w, 0x22) | HAS_BYTE(w, 0x5C);
            if (!m) {
                memcpy(d, &w, 8); d += 8; i += 8;
                continue;
            }
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            /* the lowest flagged byte is exact (borrows only run upwards): copy up to it */
            int first = __builtin_ctzll(m) >> 3;
            memcpy(d, &w, 8); d += first; i += first;
#endif
        }
        unsigned char c = s[i++];
        if (c >= 0x20 && c != '"' && c != '\\') { *d++ = (char)c; continue; }
        *d++ = '\\';
        switch (c) {
        case '"': *d++ = '"'; break;
        case '\\': *d++ = '\\'; break;
        case '\b': *d++ = 'b'; break;
        case '\f': *d++ = 'f'; break;
        case '\n': *d++ = 'n'; break;
        case '\r': *d++ = 'r'; break;
        case '\t': *d++ = 't'; break;
        default: *d++ = 'u'; *d++ = '0'; *d++ = '0'; *d++ = HEXD[c >> 4]; *d++ = HEXD[c & 15];
        }
    }
    *d++ = '"';
    o->n = d - o->p;
    return 0;
}

static int opt_i64(PyObject *o, int64_t *v) {
    if (o == Py_None) return 0;
    *v = PyLong_AsLongLong(o);
    if (*v == -1 && PyErr_Occurred()) return -1;
    return 1;
}

/*
 * format_v2(data, count, base_offset, base_ts, lat, max_ts, base_seq, json, enc, ts_name, suffix,
 *           from_offset, to_offset, from_time, to_time, key, max_records) -> (bytes, emitted) | None
 * The record lines of an uncompressed (or decompressed) v2 payload, as Dumper writes them for a
 * batch that is not a control batch and has no internal-topic decoder: text (ts_name is
 * "CreateTime"/...) or JSON (ts_name is the JSON timestamp_type; suffix ends each object). Records
 * are filtered like RecordFilter.record_matches and at most max_records (-1: all) are written.
 * None when Python must format the batch: malformed records (its decoder gives the error), text
 * that is not printable ASCII (its escaping rules), out-of-int64 values.
 */
static PyObject *format_v2(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long count, base_offset, base_ts, max_ts, base_seq;
    int lat, json, enc;
    const char *ts_name, *suffix;
    Py_ssize_t ts_len, suf_len, max_records;
    PyObject *fo, *to, *fto, *tto, *keyo;
    if (!PyArg_ParseTuple(args, "y*LLLpLLpis#s#OOOOOn", &view, &count, &base_offset, &base_ts, &lat, &max_ts,
                          &base_seq, &json, &enc, &ts_name, &ts_len, &suffix, &suf_len, &fo, &to, &fto, &tto,
                          &keyo, &max_records))
        return NULL;
    int64_t from_off = 0, to_off = 0, from_ts = 0, to_ts = 0;
    int has_fo, has_to, has_fts, has_tts;
    PyObject *result = NULL;
    obuf o = {0};
    hdr_buf hb = {0};
    const char *fk = NULL;
    Py_ssize_t fkl = 0;
    if ((has_fo = opt_i64(fo, &from_off)) < 0 || (has_to = opt_i64(to, &to_off)) < 0 ||
        (has_fts = opt_i64(fto, &from_ts)) < 0 || (has_tts = opt_i64(tto, &to_ts)) < 0)
        goto done;
    if (keyo != Py_None) {
        if (PyBytes_AsStringAndSize(keyo, (char **)&fk, &fkl) < 0) goto done;
    }
    const unsigned char *d = view.buf;
    cursor c = {d, view.len, 0};
    Py_ssize_t emitted = 0;
    int defer = 0;
    for (long long r = 0; r < count; r++) {
        rec_t rec;
        int rc = next_record(&c, &rec, &hb);
        if (rc < 0) goto done;
        if (rc > 0) { defer = 1; break; }
        int64_t off, ts;
        if (__builtin_add_overflow((int64_t)base_offset, rec.od, &off)) { defer = 1; break; }
        if (lat) ts = max_ts;
        else if (__builtin_add_overflow((int64_t)base_ts, rec.tsd, &ts)) { defer = 1; break; }
        if ((has_fo && off < from_off) || (has_to && off > to_off) || (has_fts && ts < from_ts) ||
            (has_tts && ts > to_ts))
            continue;
        if (fk && (rec.ks < 0 || rec.ke - rec.ks != fkl || memcmp(d + rec.ks, fk, fkl) != 0)) continue;
        if (max_records >= 0 && emitted >= max_records) continue;  /* the rest is still checked */
        int64_t seq = -1;
        if (base_seq >= 0) {
            seq = base_seq + rec.od;
            if (seq > 0x7FFFFFFF) seq -= ((int64_t)1 << 31);
        }
        int e = 0;
        if (json) {
            e |= OB_LIT(&o, "{\"type\":\"record\",\"offset\":") || ob_i64(&o, off) || OB_LIT(&o, ",\"timestamp\":") ||
                 ob_i64(&o, ts) || OB_LIT(&o, ",\"timestamp_type\":\"") || ob_put(&o, ts_name, ts_len) ||
                 OB_LIT(&o, "\",\"key\":");
            if (!e) e |= rec.ks < 0 ? OB_LIT(&o, "null") : json_value(&o, d + rec.ks, rec.ke - rec.ks, enc);
            if (!e) e |= OB_LIT(&o, ",\"value\":");
            if (!e) e |= rec.vs < 0 ? OB_LIT(&o, "null") : json_value(&o, d + rec.vs, rec.ve - rec.vs, enc);
            if (!e) e |= OB_LIT(&o, ",\"headers\":[");
            for (int64_t h = 0; h < rec.hc && !e; h++) {
                Py_ssize_t *q = hb.h + 4 * h;
                e |= (h ? OB_LIT(&o, ",{\"key\":") : OB_LIT(&o, "{\"key\":")) ||
                     json_value(&o, d + q[0], q[1] - q[0], ENC_TEXT) || OB_LIT(&o, ",\"value\":");
                if (!e) e |= q[2] < 0 ? OB_LIT(&o, "null") : json_value(&o, d + q[2], q[3] - q[2], enc);
                if (!e) e |= OB_LIT(&o, "}");
            }
            if (!e) e |= OB_LIT(&o, "],\"sequence\":") || ob_i64(&o, seq) || OB_LIT(&o, ",\"size\":") ||
                         ob_i64(&o, rec.end - rec.start) || OB_LIT(&o, ",\"batch_offset\":") ||
                         ob_i64(&o, base_offset) || ob_put(&o, suffix, suf_len) || OB_LIT(&o, "\n");
            if (e) goto done;
        } else {
            e |= OB_LIT(&o, "| offset: ") || ob_i64(&o, off) || OB_LIT(&o, " ") || ob_put(&o, ts_name, ts_len) ||
                 OB_LIT(&o, ": ") || ob_i64(&o, ts) || OB_LIT(&o, " keySize: ") ||
                 ob_i64(&o, rec.ks < 0 ? -1 : rec.ke - rec.ks) || OB_LIT(&o, " valueSize: ") ||
                 ob_i64(&o, rec.vs < 0 ? -1 : rec.ve - rec.vs) || OB_LIT(&o, " sequence: ") || ob_i64(&o, seq) ||
                 OB_LIT(&o, " headerKeys: [");
            if (e) goto done;
            int t = 0;
            for (int64_t h = 0; h < rec.hc && !t; h++) {
                Py_ssize_t *q = hb.h + 4 * h;
                if (h && OB_LIT(&o, ",")) goto done;
                if ((t = text_value(&o, d + q[0], q[1] - q[0], ENC_TEXT)) < 0) goto done;
            }
            if (!t && OB_LIT(&o, "]")) goto done;
            if (!t && rec.hc) {
                if (OB_LIT(&o, " headers: [")) goto done;
                for (int64_t h = 0; h < rec.hc && !t; h++) {
                    Py_ssize_t *q = hb.h + 4 * h;
                    if ((h && OB_LIT(&o, ", "))) goto done;
                    if ((t = text_value(&o, d + q[0], q[1] - q[0], ENC_TEXT)) < 0) goto done;
                    if (t) break;
                    if (OB_LIT(&o, "=")) goto done;
                    if (q[2] < 0) { if (OB_LIT(&o, "null")) goto done; }
                    else if ((t = text_value(&o, d + q[2], q[3] - q[2], enc)) < 0) goto done;
                }
                if (!t && OB_LIT(&o, "]")) goto done;
            }
            if (!t && rec.ks >= 0) {
                if (OB_LIT(&o, " key: ")) goto done;
                if ((t = text_value(&o, d + rec.ks, rec.ke - rec.ks, enc)) < 0) goto done;
            }
            if (!t && rec.vs >= 0) {
                if (OB_LIT(&o, " payload: ")) goto done;
                if ((t = text_value(&o, d + rec.vs, rec.ve - rec.vs, enc)) < 0) goto done;
            }
            if (t) { defer = 1; break; }
            if (OB_LIT(&o, "\n")) goto done;
        }
        emitted++;
    }
    if (!defer && c.pos != view.len && count > 0) defer = 1;
    if (defer) { result = Py_None; Py_INCREF(result); }
    else result = Py_BuildValue("(y#n)", o.p ? o.p : "", o.n, emitted);
done:
    PyMem_Free(o.p);
    PyMem_Free(hb.h);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * Record encoder for append: batch._encode_v2_records in one call.
 */
static inline int ob_uvarint(obuf *o, uint64_t v) {
    if (ob_reserve(o, 10)) return -1;
    char *d = o->p + o->n;
    while (v >= 0x80) { *d++ = (char)((v & 0x7F) | 0x80); v >>= 7; }
    *d++ = (char)v;
    o->n = d - o->p;
    return 0;
}
static inline uint64_t zz64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int uvarint_size(uint64_t v) { int k = 1; while (v >= 0x80) { v >>= 7; k++; } return k; }

/* bytes or None -> (ptr, len) with len -1 for None; 1 = not bytes (Python handles it) */
static inline int bytes_or_none(PyObject *o, const char **p, Py_ssize_t *n) {
    if (o == Py_None) { *p = NULL; *n = -1; return 0; }
    if (!PyBytes_CheckExact(o)) return 1;
    *p = PyBytes_AS_STRING(o); *n = PyBytes_GET_SIZE(o);
    return 0;
}

/*
 * encode_records(records, base_ts) -> bytes | None
 * ``records`` is a list of (offset_delta, timestamp, key, value, headers) as build_v2_batch takes
 * them; the result is exactly batch._encode_v2_records(records, base_ts). None when something is
 * not plain (not bytes, out of range): the Python encoder then does it, with its errors.
 */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    PyObject *records;
    long long base_ts;
    if (!PyArg_ParseTuple(args, "O!L", &PyList_Type, &records, &base_ts)) return NULL;
    obuf o = {0};
    Py_ssize_t nrec = PyList_GET_SIZE(records);
    PyObject *result = NULL;
    int defer = 0;
    for (Py_ssize_t r = 0; r < nrec && !defer; r++) {
        PyObject *t = PyList_GET_ITEM(records, r);
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 5) { defer = 1; break; }
        int of1 = 0, of2 = 0;
        long long od = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, 0), &of1);
        long long ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, 1), &of2);
        if (PyErr_Occurred()) { PyErr_Clear(); defer = 1; break; }
        if (of1 || of2 || od < INT32_MIN || od > INT32_MAX) { defer = 1; break; }
        int64_t d;
        if (__builtin_sub_overflow((int64_t)ts, (int64_t)base_ts, &d)) { defer = 1; break; }
        const char *kp, *vp;
        Py_ssize_t kl, vl;
        if (bytes_or_none(PyTuple_GET_ITEM(t, 2), &kp, &kl) || bytes_or_none(PyTuple_GET_ITEM(t, 3), &vp, &vl)) {
            defer = 1; break;
        }
        PyObject *hs = PyTuple_GET_ITEM(t, 4);
        Py_ssize_t nh = 0;
        int hs_true = PyObject_IsTrue(hs);
        if (hs_true < 0) { PyErr_Clear(); defer = 1; break; }
        if (hs_true) {
            if (!PyTuple_CheckExact(hs) && !PyList_CheckExact(hs)) { defer = 1; break; }
            nh = PySequence_Fast_GET_SIZE(hs);
        }
        /* body size first (the length varint comes before it) */
        uint64_t body = 1 + uvarint_size(zz64(d)) + uvarint_size(zz64(od)) +
                        (kl < 0 ? 1 : uvarint_size(zz64(kl)) + kl) + (vl < 0 ? 1 : uvarint_size(zz64(vl)) + vl) +
                        uvarint_size(zz64(nh));
        for (Py_ssize_t h = 0; h < nh; h++) {
            PyObject *pair = PySequence_Fast_ITEMS(hs)[h];
            if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) { defer = 1; break; }
            PyObject *hk = PyTuple_GET_ITEM(pair, 0), *hv = PyTuple_GET_ITEM(pair, 1);
            Py_ssize_t hkl, hvl;
            if (PyUnicode_CheckExact(hk)) {
                if (!PyUnicode_AsUTF8AndSize(hk, &hkl)) { PyErr_Clear(); defer = 1; break; }
            } else if (PyBytes_CheckExact(hk)) hkl = PyBytes_GET_SIZE(hk);
            else { defer = 1; break; }
            const char *hvp;
            if (bytes_or_none(hv, &hvp, &hvl)) { defer = 1; break; }
            if (hkl > INT32_MAX || hvl > INT32_MAX) { defer = 1; break; }
            body += uvarint_size(zz64(hkl)) + hkl + (hvl < 0 ? 1 : uvarint_size(zz64(hvl)) + hvl);
        }
        if (defer) break;
        if (kl > INT32_MAX || vl > INT32_MAX || body > INT32_MAX) { defer = 1; break; }
        if (ob_reserve(&o, (Py_ssize_t)body + 5)) goto done;
        ob_uvarint(&o, zz64((int64_t)body));
        o.p[o.n++] = 0;
        ob_uvarint(&o, zz64(d));
        ob_uvarint(&o, zz64(od));
        if (kl < 0) o.p[o.n++] = 1;
        else { ob_uvarint(&o, zz64(kl)); memcpy(o.p + o.n, kp, kl); o.n += kl; }
        if (vl < 0) o.p[o.n++] = 1;
        else { ob_uvarint(&o, zz64(vl)); memcpy(o.p + o.n, vp, vl); o.n += vl; }
        ob_uvarint(&o, zz64(nh));
        for (Py_ssize_t h = 0; h < nh; h++) {
            PyObject *pair = PySequence_Fast_ITEMS(hs)[h];
            PyObject *hk = PyTuple_GET_ITEM(pair, 0), *hv = PyTuple_GET_ITEM(pair, 1);
            const char *hkp;
            Py_ssize_t hkl;
            if (PyUnicode_CheckExact(hk)) hkp = PyUnicode_AsUTF8AndSize(hk, &hkl);
            else { hkp = PyBytes_AS_STRING(hk); hkl = PyBytes_GET_SIZE(hk); }
            ob_uvarint(&o, zz64(hkl));
            memcpy(o.p + o.n, hkp, hkl); o.n += hkl;
            if (hv == Py_None) o.p[o.n++] = 1;
            else {
                Py_ssize_t hvl = PyBytes_GET_SIZE(hv);
                ob_uvarint(&o, zz64(hvl));
                memcpy(o.p + o.n, PyBytes_AS_STRING(hv), hvl); o.n += hvl;
            }
        }
    }
    if (defer) { result = Py_None; Py_INCREF(result); }
    else result = PyBytes_FromStringAndSize(o.p ? o.p : "", o.n);
done:
    PyMem_Free(o.p);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * JSON lines reader for append: the plain lines of the record schema in C, the rest deferred to
 * commands/append.parse_json_record (the reference: its results and its error messages).
 */
typedef struct {
    const unsigned char *p;
    Py_ssize_t i, n;
} jcur;

#define DEFER 1
static inline void jws(jcur *c) {
    while (c->i < c->n) {
        unsigned char ch = c->p[c->i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') c->i++;
        else break;
    }
}
static inline int hexv(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}
static int read_u4(jcur *c, uint32_t *out) {
    if (c->n - c->i < 4) return DEFER;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexv(c->p[c->i + k]);
        if (h < 0) return DEFER;
        v = (v << 4) | (uint32_t)h;
    }
    c->i += 4;
    *out = v;
    return 0;
}
/* A JSON string at c (opening quote); its UTF-8 text goes to o when o is not NULL. 0, DEFER, -1 */
static int jstring(jcur *c, obuf *o) {
    if (c->i >= c->n || c->p[c->i] != '"') return DEFER;
    c->i++;
    /* the text is never longer than its JSON form: reserve that once, write without checks */
    if (o && ob_reserve(o, c->n - c->i)) return -1;
    char *d = o ? o->p + o->n : NULL;
    const unsigned char *p = c->p;
    Py_ssize_t i = c->i, n = c->n;
    int rc = DEFER;
    for (;;) {
        Py_ssize_t start = i;
        while (i + 8 <= n) {  /* 8 plain bytes at a time (no quote, backslash or control byte) */
            uint64_t w;
            memcpy(&w, p + i, 8);
            uint64_t m = HAS_LESS(w, 0x20) | HAS_BYTE(w, 0x22) | HAS_BYTE(w, 0x5C);
            if (m) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                i += __builtin_ctzll(m) >> 3;  /* the lowest flagged byte is exact */
#endif
                break;
            }
            i += 8;
        }
        while (i < n) {
            unsigned char ch = p[i];
            if (ch == '"' || ch == '\\' || ch < 0x20) break;
            i++;
        }
        if (d && i > start) { memcpy(d, p + start, i - start); d += i - start; }
        if (i >= n) goto out;
        unsigned char ch = p[i];
        if (ch == '"') { i++; rc = 0; goto out; }
        if (ch < 0x20) goto out;
        i++;  /* backslash */
        if (i >= n) goto out;
        unsigned char e = p[i++];
        char ec;
        switch (e) {
        case '"': ec = '"'; break;
        case '\\': ec = '\\'; break;
        case '/': ec = '/'; break;
        case 'b': ec = '\b'; break;
        case 'f': ec = '\f'; break;
        case 'n': ec = '\n'; break;
        case 'r': ec = '\r'; break;
        case 't': ec = '\t'; break;
        case 'u': {
            uint32_t u;
            c->i = i;
            if (read_u4(c, &u)) goto out;
            i = c->i;
            if (u >= 0xDC00 && u <= 0xDFFF) goto out;  /* a lone low surrogate */
            if (u >= 0xD800 && u <= 0xDBFF) {
                uint32_t lo;
                if (n - i < 6 || p[i] != '\\' || p[i + 1] != 'u') goto out;
                c->i = i + 2;
                if (read_u4(c, &lo) || lo < 0xDC00 || lo > 0xDFFF) goto out;
                i = c->i;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (d) {
                if (u < 0x80) *d++ = (char)u;
                else if (u < 0x800) { *d++ = (char)(0xC0 | (u >> 6)); *d++ = (char)(0x80 | (u & 63)); }
                else if (u < 0x10000) {
                    *d++ = (char)(0xE0 | (u >> 12)); *d++ = (char)(0x80 | ((u >> 6) & 63));
                    *d++ = (char)(0x80 | (u & 63));
                } else {
                    *d++ = (char)(0xF0 | (u >> 18)); *d++ = (char)(0x80 | ((u >> 12) & 63));
                    *d++ = (char)(0x80 | ((u >> 6) & 63)); *d++ = (char)(0x80 | (u & 63));
                }
            }
            continue;
        }
        default: goto out;
        }
        if (d) *d++ = ec;
    }
out:
    c->i = i;
    if (d) o->n = d - o->p;
    return rc;
}
/* An integer literal that fits int64 (not a float form): 0, DEFER */
static int jint(jcur *c, int64_t *v) {
    Py_ssize_t i = c->i;
    int neg = 0;
    if (i < c->n && c->p[i] == '-') { neg = 1; i++; }
    if (i >= c->n || c->p[i] < '0' || c->p[i] > '9') return DEFER;
    if (c->p[i] == '0' && i + 1 < c->n && c->p[i + 1] >= '0' && c->p[i + 1] <= '9') return DEFER;
    uint64_t acc = 0;
    int digits = 0;
    while (i < c->n && c->p[i] >= '0' && c->p[i] <= '9') {
        if (++digits > 18) return DEFER;
        acc = acc * 10 + (uint64_t)(c->p[i] - '0');
        i++;
    }
    if (i < c->n && (c->p[i] == '.' || c->p[i] == 'e' || c->p[i] == 'E')) return DEFER;
    *v = neg ? -(int64_t)acc : (int64_t)acc;
    c->i = i;
    return 0;
}
static int jlit(jcur *c, const char *lit) {
    size_t k = strlen(lit);
    if ((size_t)(c->n - c->i) < k || memcmp(c->p + c->i, lit, k) != 0) return DEFER;
    c->i += (Py_ssize_t)k;
    return 0;
}
/* Any JSON value, checked and skipped (no NaN/Infinity forms: those are deferred). */
static int jskip(jcur *c, int depth) {
    if (depth > 64 || c->i >= c->n) return DEFER;
    unsigned char ch = c->p[c->i];
    if (ch == '"') return jstring(c, NULL);
    if (ch == 't') return jlit(c, "true");
    if (ch == 'f') return jlit(c, "false");
    if (ch == 'n') return jlit(c, "null");
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        Py_ssize_t i = c->i;
        if (c->p[i] == '-') i++;
        if (i >= c->n || c->p[i] < '0' || c->p[i] > '9') return DEFER;
        if (c->p[i] == '0') i++;
        else while (i < c->n && c->p[i] >= '0' && c->p[i] <= '9') i++;
        if (i < c->n && c->p[i] == '.') {
            i++;
            if (i >= c->n || c->p[i] < '0' || c->p[i] > '9') return DEFER;
            while (i < c->n && c->p[i] >= '0' && c->p[i] <= '9') i++;
        }
        if (i < c->n && (c->p[i] == 'e' || c->p[i] == 'E')) {
            i++;
            if (i < c->n && (c->p[i] == '+' || c->p[i] == '-')) i++;
            if (i >= c->n || c->p[i] < '0' || c->p[i] > '9') return DEFER;
            while (i < c->n && c->p[i] >= '0' && c->p[i] <= '9') i++;
        }
        c->i = i;
        return 0;
    }
    if (ch == '[' || ch == '{') {
        unsigned char close = ch == '[' ? ']' : '}';
        c->i++;
        jws(c);
        if (c->i < c->n && c->p[c->i] == close) { c->i++; return 0; }
        for (;;) {
            int rc;
            if (ch == '{') {
                if ((rc = jstring(c, NULL))) return rc;
                jws(c);
                if (c->i >= c->n || c->p[c->i] != ':') return DEFER;
                c->i++;
                jws(c);
            }
            if ((rc = jskip(c, depth + 1))) return rc;
            jws(c);
            if (c->i >= c->n) return DEFER;
            if (c->p[c->i] == ',') { c->i++; jws(c); continue; }
            if (c->p[c->i] == close) { c->i++; return 0; }
            return DEFER;
        }
    }
    return DEFER;
}
/* A member name without escapes: its span. */
static int jname(jcur *c, const unsigned char **s, Py_ssize_t *k) {
    if (c->i >= c->n || c->p[c->i] != '"') return DEFER;
    Py_ssize_t start = ++c->i;
    while (c->i < c->n && c->p[c->i] != '"') {
        if (c->p[c->i] == '\\' || c->p[c->i] < 0x20) return DEFER;
        c->i++;
    }
    if (c->i >= c->n) return DEFER;
    *s = c->p + start;
    *k = c->i - start;
    c->i++;
    return 0;
}
#define NAME_IS(s, k, lit) ((k) == (Py_ssize_t)(sizeof(lit) - 1) && memcmp((s), (lit), (k)) == 0)

/* A string or null as bytes / None (new reference in *out). */
static int jbytes(jcur *c, obuf *tmp, PyObject **out) {
    if (c->i < c->n && c->p[c->i] == 'n') {
        if (jlit(c, "null")) return DEFER;
        Py_INCREF(Py_None);
        *out = Py_None;
        return 0;
    }
    tmp->n = 0;
    int rc = jstring(c, tmp);
    if (rc) return rc;
    *out = PyBytes_FromStringAndSize(tmp->p ? tmp->p : "", tmp->n);
    return *out ? 0 : -1;
}

/* headers: [] / {} / null -> (); a list of {"key": str, "value": str|null} -> tuple of pairs */
static int jheaders(jcur *c, obuf *tmp, PyObject **out) {
    if (c->i >= c->n) return DEFER;
    unsigned char ch = c->p[c->i];
    if (ch == 'n') {
        if (jlit(c, "null")) return DEFER;
        *out = PyTuple_New(0);
        return *out ? 0 : -1;
    }
    if (ch == '{') {
        c->i++;
        jws(c);
        if (c->i < c->n && c->p[c->i] == '}') { c->i++; *out = PyTuple_New(0); return *out ? 0 : -1; }
        return DEFER;
    }
    if (ch != '[') return DEFER;
    c->i++;
    PyObject *list = PyList_New(0);
    if (!list) return -1;
    int rc = 0;
    jws(c);
    if (c->i < c->n && c->p[c->i] == ']') { c->i++; goto finish; }
    for (;;) {
        if (c->i >= c->n || c->p[c->i] != '{') { rc = DEFER; goto fail; }
        c->i++;
        jws(c);
        PyObject *hk = NULL, *hv = NULL;
        for (;;) {
            const unsigned char *nm;
            Py_ssize_t nk;
            if ((rc = jname(c, &nm, &nk))) break;
            jws(c);
            if (c->i >= c->n || c->p[c->i] != ':') { rc = DEFER; break; }
            c->i++;
            jws(c);
            PyObject **slot;
            if (NAME_IS(nm, nk, "key")) slot = &hk;
            else if (NAME_IS(nm, nk, "value")) slot = &hv;
            else { rc = DEFER; break; }
            if (*slot) { rc = DEFER; break; }
            if ((rc = jbytes(c, tmp, slot))) break;
            jws(c);
            if (c->i < c->n && c->p[c->i] == ',') { c->i++; jws(c); continue; }
            if (c->i < c->n && c->p[c->i] == '}') { c->i++; break; }
            rc = DEFER;
            break;
        }
        if (!rc && (hk == NULL || hk == Py_None)) rc = DEFER;
        if (rc) { Py_XDECREF(hk); Py_XDECREF(hv); goto fail; }
        if (!hv) { hv = Py_None; Py_INCREF(hv); }
        PyObject *pair = PyTuple_Pack(2, hk, hv);
        Py_DECREF(hk);
        Py_DECREF(hv);
        if (!pair || PyList_Append(list, pair) < 0) { Py_XDECREF(pair); rc = -1; goto fail; }
        Py_DECREF(pair);
        jws(c);
        if (c->i < c->n && c->p[c->i] == ',') { c->i++; jws(c); continue; }
        if (c->i < c->n && c->p[c->i] == ']') { c->i++; break; }
        rc = DEFER;
        goto fail;
    }
finish:
    *out = PyList_AsTuple(list);
    Py_DECREF(list);
    return *out ? 0 : -1;
fail:
    Py_DECREF(list);
    return rc;
}

static inline int strip_ws(unsigned char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == 0x0b || ch == 0x0c || (ch >= 0x1c && ch <= 0x1f);
}

/* One line: 0 with *out set (a new reference: None, skip or a tuple), DEFER, -1 */
static int json_line(const unsigned char *p, Py_ssize_t n, PyObject *skip, obuf *tmp, PyObject **out) {
    Py_ssize_t a = 0, b = n;
    while (a < b && strip_ws(p[a])) a++;
    while (b > a && strip_ws(p[b - 1])) b--;
    if (a == b) { Py_INCREF(Py_None); *out = Py_None; return 0; }
    if (!utf8_valid(p + a, b - a)) return DEFER;
    jcur c = {p, a, b};
    if (p[a] != '{') return DEFER;
    c.i++;
    jws(&c);
    PyObject *f[3] = {NULL, NULL, NULL};  /* key, value, headers */
    int have_ts = 0, have_part = 0, have_type = 0, have_ctrl = 0, skipit = 0;
    int64_t ts = 0, part = 0;
    int ts_null = 1, part_null = 1;
    int rc = 0;
    if (c.i < c.n && p[c.i] == '}') { c.i++; goto end; }
    for (;;) {
        const unsigned char *nm;
        Py_ssize_t nk;
        if ((rc = jname(&c, &nm, &nk))) goto fail;
        jws(&c);
        if (c.i >= c.n || p[c.i] != ':') { rc = DEFER; goto fail; }
        c.i++;
        jws(&c);
        if (NAME_IS(nm, nk, "key") || NAME_IS(nm, nk, "value")) {
            int w = nm[0] == 'k' ? 0 : 1;
            if (f[w]) { rc = DEFER; goto fail; }
            if ((rc = jbytes(&c, tmp, &f[w]))) goto fail;
        } else if (NAME_IS(nm, nk, "headers")) {
            if (f[2]) { rc = DEFER; goto fail; }
            if ((rc = jheaders(&c, tmp, &f[2]))) goto fail;
        } else if (NAME_IS(nm, nk, "timestamp") || NAME_IS(nm, nk, "partition")) {
            int is_ts = nm[0] == 't';
            if (is_ts ? have_ts++ : have_part++) { rc = DEFER; goto fail; }
            int isnull = c.i < c.n && p[c.i] == 'n';
            int64_t v = 0;
            if (isnull ? jlit(&c, "null") : jint(&c, &v)) { rc = DEFER; goto fail; }
            if (is_ts) { ts = v; ts_null = isnull; } else { part = v; part_null = isnull; }
        } else if (NAME_IS(nm, nk, "type")) {
            if (have_type++) { rc = DEFER; goto fail; }
            if (c.i < c.n && p[c.i] == 'n') { if (jlit(&c, "null")) { rc = DEFER; goto fail; } }
            else {
                const unsigned char *tv;
                Py_ssize_t tk;
                if ((rc = jname(&c, &tv, &tk))) goto fail;  /* a string without escapes */
                if (!NAME_IS(tv, tk, "record")) skipit = 1;
            }
        } else if (NAME_IS(nm, nk, "control")) {
            if (have_ctrl++) { rc = DEFER; goto fail; }
            if (c.i < c.n && p[c.i] == 'n') { if (jlit(&c, "null")) { rc = DEFER; goto fail; } }
            else {
                if ((rc = jskip(&c, 1))) goto fail;
                skipit = 1;
            }
        } else {
            if ((rc = jskip(&c, 1))) goto fail;
        }
        jws(&c);
        if (c.i < c.n && p[c.i] == ',') { c.i++; jws(&c); continue; }
        if (c.i < c.n && p[c.i] == '}') { c.i++; break; }
        rc = DEFER;
        goto fail;
    }
end:
    if (c.i != c.n) { rc = DEFER; goto fail; }
    if (skipit) {
        Py_INCREF(skip);
        *out = skip;
        rc = 0;
        goto fail;  /* releases the fields */
    }
    for (int k = 0; k < 2; k++) if (!f[k]) { f[k] = Py_None; Py_INCREF(Py_None); }
    if (!f[2]) { f[2] = PyTuple_New(0); if (!f[2]) { rc = -1; goto fail; } }
    PyObject *tso = ts_null ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(ts);
    PyObject *po = part_null ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(part);
    if (!tso || !po) { Py_XDECREF(tso); Py_XDECREF(po); rc = -1; goto fail; }
    *out = PyTuple_Pack(5, f[0], f[1], f[2], tso, po);
    Py_DECREF(tso);
    Py_DECREF(po);
    rc = *out ? 0 : -1;
fail:
    for (int k = 0; k < 3; k++) Py_XDECREF(f[k]);
    return rc;
}

/*
 * parse_json_lines(block, skip[, stop]) -> (list, deferred), one item per line of block[:stop] (lines end with "\n"; the last may
 * not): None for a blank line, ``skip`` for a line that is not a data record, a tuple (key, value,
 * headers, timestamp, partition) for a plain record, False where append.parse_json_record must
 * read the line itself (anything less plain, and every error); ``deferred`` counts those.
 */
static PyObject *parse_json_lines(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *skip;
    Py_ssize_t stop = -1;
    if (!PyArg_ParseTuple(args, "y*O|n", &view, &skip, &stop)) return NULL;
    PyObject *list = PyList_New(0);
    obuf tmp = {0};
    const unsigned char *p = view.buf;
    Py_ssize_t n = stop >= 0 && stop < view.len ? stop : view.len, i = 0, deferred = 0;
    while (list && i < n) {
        const unsigned char *nl = memchr(p + i, '\n', (size_t)(n - i));
        Py_ssize_t e = nl ? (Py_ssize_t)(nl - p) + 1 : n;
        PyObject *item = NULL;
        int rc = json_line(p + i, e - i, skip, &tmp, &item);
        if (rc < 0) { Py_CLEAR(list); break; }
        if (rc == DEFER) { item = Py_False; Py_INCREF(item); deferred++; }
        if (PyList_Append(list, item) < 0) Py_CLEAR(list);
        Py_DECREF(item);
        i = e;
    }
    PyMem_Free(tmp.p);
    PyBuffer_Release(&view);
    if (!list) return NULL;
    return Py_BuildValue("(Nn)", list, deferred);
}

/*
 * fill_records(items, i, records, lines, partition, override, first_line, now, rec_overhead,
 *              batch_overhead, est, batch_bytes, batch_records, headers_ok, skip) -> (i, est, skipped)
 * Appender.add() for items[i:] (parse_json_lines' output) in one call, as long as each is plain: a
 * tuple whose partition (``override`` if not None, else its own) is ``partition``, with bytes or None
 * key/value, an int timestamp in [-1, 2^63) or None (``now``), bytes header pairs (only when
 * ``headers_ok``), and that fits the open batch (``records``/``lines``, ``est`` bytes so far). Blank
 * lines and ``skip`` items are passed over (counted in ``skipped``). Stops at the first item that
 * is not so: Appender.add() does it, with its checks, flushes and errors. An item tuple that only
 * ``items`` refers to becomes its record in place, and ``items[j]`` None (items[i:] on return are
 * untouched).
 */
static PyObject *fill_records(PyObject *self, PyObject *args) {
    PyObject *items, *records, *lines, *override, *skip;
    Py_ssize_t i, first_line;
    long long partition, now, rec_overhead, batch_overhead, est, batch_bytes, batch_records;
    int headers_ok;
    if (!PyArg_ParseTuple(args, "O!nO!O!LOnLLLLLLpO", &PyList_Type, &items, &i, &PyList_Type, &records, &PyList_Type,
                          &lines, &partition, &override, &first_line, &now, &rec_overhead, &batch_overhead, &est,
                          &batch_bytes, &batch_records, &headers_ok, &skip))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items), skipped = 0;
    int has_override = override != Py_None;
    if (has_override) {
        long long ov = PyLong_AsLongLong(override);
        if (ov == -1 && PyErr_Occurred()) return NULL;
        if (ov != partition) return Py_BuildValue("(nLn)", i, est, skipped);
    }
    for (; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(items, i);
        if (t == Py_None || t == skip) { skipped += t == skip; continue; }
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 5) break;
        PyObject *k = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1), *hs = PyTuple_GET_ITEM(t, 2);
        PyObject *tso = PyTuple_GET_ITEM(t, 3), *po = PyTuple_GET_ITEM(t, 4);
        if (!has_override) {
            if (!PyLong_CheckExact(po)) break;
            int of = 0;
            long long pv = PyLong_AsLongLongAndOverflow(po, &of);
            if (of || pv != partition) break;
        }
        if ((k != Py_None && !PyBytes_CheckExact(k)) || (v != Py_None && !PyBytes_CheckExact(v))) break;
        int of = 0;
        long long ts = now;
        if (tso != Py_None) {
            if (!PyLong_CheckExact(tso)) break;
            ts = PyLong_AsLongLongAndOverflow(tso, &of);
            if (of || ts < -1) break;
        }
        long long e = rec_overhead + (k == Py_None ? 0 : PyBytes_GET_SIZE(k)) + (v == Py_None ? 0 : PyBytes_GET_SIZE(v));
        if (!PyTuple_CheckExact(hs)) break;
        Py_ssize_t nh = PyTuple_GET_SIZE(hs);
        if (nh && !headers_ok) break;
        int bad = 0;
        for (Py_ssize_t h = 0; h < nh; h++) {
            PyObject *pair = PyTuple_GET_ITEM(hs, h);
            if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_CheckExact(PyTuple_GET_ITEM(pair, 0))) { bad = 1; break; }
            PyObject *hv = PyTuple_GET_ITEM(pair, 1);
            if (hv != Py_None && !PyBytes_CheckExact(hv)) { bad = 1; break; }
            e += PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0)) + (hv == Py_None ? 0 : PyBytes_GET_SIZE(hv)) + 2;
        }
        if (bad) break;
        Py_ssize_t nrec = PyList_GET_SIZE(records);
        if (nrec && (est + e > batch_bytes || nrec >= batch_records)) break;  /* full: add() flushes */
        if (!nrec) est = batch_overhead;
        PyObject *idx = PyLong_FromSsize_t(nrec);
        PyObject *tsn = tso != Py_None ? (Py_INCREF(tso), tso) : PyLong_FromLongLong(now);
        PyObject *ln = idx && tsn ? PyLong_FromSsize_t(first_line + i) : NULL;
        PyObject *rec = NULL;
        if (ln && Py_REFCNT(t) == 1) {
            /* Only items holds the parsed tuple: it becomes the record (idx, ts, key, value, headers)
               in place, and items[i] None, which saves a tuple per record. */
            Py_INCREF(Py_None);
            PyList_SET_ITEM(items, i, Py_None);  /* the list's reference to t is now ours */
            PyTuple_SET_ITEM(t, 0, idx);
            PyTuple_SET_ITEM(t, 1, tsn);
            PyTuple_SET_ITEM(t, 2, k);
            PyTuple_SET_ITEM(t, 3, v);
            PyTuple_SET_ITEM(t, 4, hs);
            Py_DECREF(tso);  /* the references items' tuple held; k, v, hs moved */
            Py_DECREF(po);
            rec = t;
        } else if (ln) {
            rec = PyTuple_New(5);
            if (rec) {
                Py_INCREF(k); Py_INCREF(v); Py_INCREF(hs);
                PyTuple_SET_ITEM(rec, 0, idx);
                PyTuple_SET_ITEM(rec, 1, tsn);
                PyTuple_SET_ITEM(rec, 2, k);
                PyTuple_SET_ITEM(rec, 3, v);
                PyTuple_SET_ITEM(rec, 4, hs);
            }
        }
        if (!rec) {
            Py_XDECREF(idx); Py_XDECREF(tsn); Py_XDECREF(ln);
            return NULL;
        }
        if (PyList_Append(records, rec) < 0 || PyList_Append(lines, ln) < 0) {
            Py_DECREF(rec); Py_DECREF(ln);
            return NULL;
        }
        Py_DECREF(rec);
        Py_DECREF(ln);
        est += e;
    }
    return Py_BuildValue("(nLn)", i, est, skipped);
}

/* ------------------------------------------------------------------------------------------
 * arrow_v2(buf, i, j, lo, hi, include_control, limit_rows, limit_bytes, rows, nbytes, outs)
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
 * >= limit_bytes after the batch before i); 2 the batch at i needs Python (compressed, a control
 * batch to return, malformed records, out-of-int64 values: the reference decoder decides, nothing
 * of it was appended); 3 the batch at i starts at or past hi (the read is over).
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
static PyObject *arrow_records(PyObject *self, PyObject *args) {
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

static PyObject *arrow_v2(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t i, j, limit_rows, rows;
    long long limit_bytes, nbytes;
    PyObject *lo_obj, *hi_obj, *outs;
    int include_control;
    if (!PyArg_ParseTuple(args, "y*nnOOpnLnLO!", &view, &i, &j, &lo_obj, &hi_obj, &include_control, &limit_rows,
                          &limit_bytes, &rows, &nbytes, &PyTuple_Type, &outs))
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
        if (attrs & 0x07) { status = 2; break; }  /* compressed */
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

static PyMethodDef methods[] = {
    {"decode_v2", decode_v2, METH_VARARGS, "Decode the records of an uncompressed v2 payload into columns."},
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C of a buffer, continuing from value (crc32c package convention)."},
    {"hw_crc", py_crc_hw, METH_VARARGS, "Whether the SSE4.2 CRC-32C path is used; hw_crc(0) turns it off, hw_crc(1) on."},
    {"walk_v2", walk_v2, METH_VARARGS, "Walk the plain, valid v2 batches of a buffer window in one call."},
    {"encode_records", encode_records, METH_VARARGS, "The records of a v2 batch, encoded (None: not plain)."},
    {"parse_json_lines", parse_json_lines, METH_VARARGS, "Plain record lines of append's JSON input, parsed."},
    {"fill_records", fill_records, METH_VARARGS, "Appender.add() for a run of plain parsed lines."},
    {"arrow_records", arrow_records, METH_VARARGS, "One decoded batch's records as Arrow column buffers (Spark reader)."},
    {"arrow_v2", arrow_v2, METH_VARARGS, "The records of a run of checked v2 batches as Arrow column buffers (Spark reader)."},
    {"format_v2", format_v2, METH_VARARGS, "The dump --records lines (text or JSON) of a v2 payload."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kltool.format._speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init_table();
    crc_init_shift();
#if HAVE_HW_CRC
    use_hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "ABI", 9) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
