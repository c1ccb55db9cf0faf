/*
 * offmap.c: the mechanics of kltool compact's offset map and record filter (the rules stay in
 * kltool/storage/change/cleaner.py, which calls these; its pure-Python twins stay the reference).
 *
 * The map is a fixed table of ``slots`` cells of 24 bytes, as Kafka's SkimpyOffsetMap: a 16-byte hash of
 * the key and the 8-byte offset, open addressing (linear probing), allocated zeroed once (calloc: pages
 * are touched as cells fill) and never grown: memory is the dedupe buffer. The hash is SipHash-2-4 with
 * its 128-bit output, keyed by 16 bytes the caller gives (kltool: random per map), where the broker uses
 * MD5 unkeyed: two keys share a cell only on a 128-bit collision of a keyed PRF, which nobody can aim
 * for without the key (MD5 collisions can be made at will).
 *
 *   offmap_new(slots, seed16, huge) -> capsule   (huge: map the table with huge pages, for a large input)
 *   offmap_len(m) -> int                            distinct keys held
 *   offmap_get(m, key) -> int                       the key's offset, -1 when absent
 *   offmap_put_key(m, key, offset) -> None          one key (v0/v1 records, the reference walk)
 *   offmap_put(m, capacity, data, count, base_offset, start) -> int | None
 *       buildOffsetMapForSegment's inner loop over an uncompressed v2 payload: every keyed record at or
 *       above ``start`` put, until the map holds ``capacity`` keys before a keyed record: its index is
 *       returned (-1: all put). None: the payload is not exactly ``count`` well-formed records (nothing
 *       was put; the Python decoder gives the error).
 *   offmap_classes(m, data, count, base_offset, latest) -> bytes | None
 *       one class byte per record (cleaner.py's KEYLESS ... BEYOND_TOMBSTONE, see record_classes there):
 *       past ``latest``: BEYOND(_TOMBSTONE); keyless: KEYLESS; below its key's offset in the map:
 *       SUPERSEDED; else LATEST(_TOMBSTONE). None as above.
 *   retained_records(data, count, classes, keep_mask, base_ts, lat, max_ts, horizon)
 *       -> (records, kept, first_ts, max_ts, last_delta) | None
 *       the records whose class bit is in ``keep_mask``, encoded as build_v2_batch encodes them (timestamp
 *       deltas from ``horizon``, or when it is None from the first kept record's timestamp; a
 *       LogAppendTime batch's records take ``max_ts``); None when something is out of range (the
 *       Python rebuild does it).
 */
#include "speedups.h"
#include <sys/mman.h>

typedef struct {
    uint64_t h0, h1;
    int64_t off;
} cell;

typedef struct {
    cell *cells;
    size_t slots, used, bytes;
    uint64_t k0, k1;
} offmap;

#define CAPSULE "kltool.offmap"

/* ----------------------------------------------------------------------------- SipHash-2-4-128 */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                           \
    do {                                                                   \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);          \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                             \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                             \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);          \
    } while (0)

static inline uint64_t le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* out16: 128-bit output (h0, h1); else 64-bit in h0 (the paper's test vector, for the tests) */
static void siphash(const unsigned char *in, size_t n, uint64_t k0, uint64_t k1, int out16,
                    uint64_t *h0, uint64_t *h1) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    if (out16) v1 ^= 0xee;
    const unsigned char *end = in + (n - n % 8);
    for (; in != end; in += 8) {
        uint64_t m = le64(in);
        v3 ^= m; SIPROUND; SIPROUND; v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    switch (n & 7) {
        case 7: b |= (uint64_t)in[6] << 48; /* fall through */
        case 6: b |= (uint64_t)in[5] << 40; /* fall through */
        case 5: b |= (uint64_t)in[4] << 32; /* fall through */
        case 4: b |= (uint64_t)in[3] << 24; /* fall through */
        case 3: b |= (uint64_t)in[2] << 16; /* fall through */
        case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
        case 1: b |= (uint64_t)in[0]; break;
        case 0: break;
    }
    v3 ^= b; SIPROUND; SIPROUND; v0 ^= b;
    v2 ^= out16 ? 0xee : 0xff;
    SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    *h0 = v0 ^ v1 ^ v2 ^ v3;
    if (!out16) return;
    v1 ^= 0xdd;
    SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    *h1 = v0 ^ v1 ^ v2 ^ v3;
}

/* ----------------------------------------------------------------------------------- the table */

static void offmap_free(PyObject *cap) {
    offmap *m = PyCapsule_GetPointer(cap, CAPSULE);
    if (m) {
        munmap(m->cells, m->bytes);
        PyMem_Free(m);
    }
}

static offmap *get_map(PyObject *o) { return PyCapsule_GetPointer(o, CAPSULE); }

typedef struct {
    uint64_t h0, h1;
    size_t i;
} hkey;

/* The key's hash and first cell, prefetched: the callers hash a run of records before probing the first,
 * so that the table's cache misses overlap. */
static inline void hash_key(offmap *m, const unsigned char *key, size_t n, hkey *k) {
    siphash(key, n, m->k0, m->k1, 1, &k->h0, &k->h1);
    if (!(k->h0 | k->h1)) k->h1 = 1; /* all-zero marks an empty cell */
    k->i = (size_t)(((unsigned __int128)k->h0 * m->slots) >> 64);
    __builtin_prefetch(m->cells + k->i, 1, 1);
}

/* 0 ok, -1 no free cell (cannot happen below the load factor the caller keeps) */
static inline int put(offmap *m, const hkey *k, int64_t off) {
    size_t i = k->i;
    for (;;) {
        cell *c = m->cells + i;
        if (c->h0 == k->h0 && c->h1 == k->h1) { c->off = off; return 0; }
        if (!(c->h0 | c->h1)) {
            if (m->used + 1 >= m->slots) return -1;
            c->h0 = k->h0; c->h1 = k->h1; c->off = off;
            m->used++;
            return 0;
        }
        if (++i == m->slots) i = 0;
    }
}

static inline int64_t get(offmap *m, const hkey *k) {
    size_t i = k->i;
    for (;;) {
        const cell *c = m->cells + i;
        if (c->h0 == k->h0 && c->h1 == k->h1) return c->off;
        if (!(c->h0 | c->h1)) return -1;
        if (++i == m->slots) i = 0;
    }
}

#define RUN 32 /* records hashed (and their cells prefetched) before the first is probed */

PyObject *offmap_new(PyObject *self, PyObject *args) {
    Py_ssize_t slots;
    Py_buffer seed;
    int huge;
    if (!PyArg_ParseTuple(args, "ny*p", &slots, &seed, &huge)) return NULL;
    if (seed.len != 16 || slots < 2) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_ValueError, "offmap_new: 16 seed bytes and at least 2 slots");
        return NULL;
    }
    offmap *m = PyMem_Malloc(sizeof(offmap));
    if (!m) { PyBuffer_Release(&seed); return PyErr_NoMemory(); }
    m->k0 = le64(seed.buf);
    m->k1 = le64((const unsigned char *)seed.buf + 8);
    PyBuffer_Release(&seed);
    m->slots = (size_t)slots;
    m->used = 0;
    m->bytes = (size_t)slots * sizeof(cell);
    void *mem = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) { PyMem_Free(m); return PyErr_NoMemory(); }
#ifdef MADV_HUGEPAGE
    /* random probes over the whole table: fewer TLB misses and page faults (advice only). Not for a map that
     * will hold few keys: a huge page is faulted in (zeroed, perhaps compacted for) for each of them. */
    if (huge) madvise(mem, m->bytes, MADV_HUGEPAGE);
#endif
    m->cells = mem;
    PyObject *cap = PyCapsule_New(m, CAPSULE, offmap_free);
    if (!cap) { munmap(mem, m->bytes); PyMem_Free(m); }
    return cap;
}

PyObject *offmap_len(PyObject *self, PyObject *arg) {
    offmap *m = get_map(arg);
    return m ? PyLong_FromSize_t(m->used) : NULL;
}

PyObject *offmap_get(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "Oy*", &cap, &key)) return NULL;
    offmap *m = get_map(cap);
    int64_t off = 0;
    if (m) {
        hkey k;
        hash_key(m, key.buf, (size_t)key.len, &k);
        off = get(m, &k);
    }
    PyBuffer_Release(&key);
    return m ? PyLong_FromLongLong(off) : NULL;
}

static PyObject *table_full(void) {
    PyErr_SetString(PyExc_RuntimeError, "offset map: no free cell (the caller's capacity must stay below the slots)");
    return NULL;
}

PyObject *offmap_put_key(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_buffer key;
    long long off;
    if (!PyArg_ParseTuple(args, "Oy*L", &cap, &key, &off)) return NULL;
    offmap *m = get_map(cap);
    int rc = 0;
    if (m) {
        hkey k;
        hash_key(m, key.buf, (size_t)key.len, &k);
        rc = put(m, &k, off);
    }
    PyBuffer_Release(&key);
    if (!m) return NULL;
    if (rc) return table_full();
    Py_RETURN_NONE;
}

/* The payload holds exactly ``count`` well-formed records (decode_v2's checks). */
static int well_formed(const unsigned char *p, Py_ssize_t n, Py_ssize_t count) {
    cursor c = {p, n, 0};
    rec_t r;
    for (Py_ssize_t i = 0; i < count; i++)
        if (next_record(&c, &r, NULL)) return 0;
    return c.pos == n;
}

PyObject *offmap_put(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_ssize_t capacity, count;
    Py_buffer view;
    long long base, start;
    if (!PyArg_ParseTuple(args, "Ony*nLL", &cap, &capacity, &view, &count, &base, &start)) return NULL;
    offmap *m = get_map(cap);
    PyObject *res = NULL;
    if (!m) goto done;
    const unsigned char *p = view.buf;
    if (count < 0 || !well_formed(p, view.len, count)) { res = Py_None; Py_INCREF(res); goto done; }
    cursor c = {p, view.len, 0};
    rec_t r;
    Py_ssize_t stop = -1, i = 0;
    hkey ks[RUN];
    Py_ssize_t at[RUN];
    int64_t offs[RUN];
    while (i < count && stop < 0) {
        int k = 0;
        for (; i < count && k < RUN; i++) {
            next_record(&c, &r, NULL);
            if (r.ks < 0 || base + r.od < start) continue;
            hash_key(m, p + r.ks, (size_t)(r.ke - r.ks), &ks[k]);
            at[k] = i;
            offs[k++] = base + r.od;
        }
        for (int j = 0; j < k; j++) {
            if ((Py_ssize_t)m->used >= capacity) { stop = at[j]; break; }
            if (put(m, &ks[j], offs[j])) { table_full(); goto done; }
        }
    }
    res = PyLong_FromSsize_t(stop);
done:
    PyBuffer_Release(&view);
    return res;
}

/* the class bytes: cleaner.py's KEYLESS, SUPERSEDED, LATEST, LATEST_TOMBSTONE, BEYOND, BEYOND_TOMBSTONE */
enum { KEYLESS, SUPERSEDED, LATEST, LATEST_TOMBSTONE, BEYOND, BEYOND_TOMBSTONE };

PyObject *offmap_classes(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_ssize_t count;
    Py_buffer view;
    long long base, latest;
    if (!PyArg_ParseTuple(args, "Oy*nLL", &cap, &view, &count, &base, &latest)) return NULL;
    offmap *m = get_map(cap);
    PyObject *res = NULL;
    if (!m) goto done;
    if (count < 0 || count > view.len) { res = Py_None; Py_INCREF(res); goto done; }
    res = PyBytes_FromStringAndSize(NULL, count);
    if (!res) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(res);
    cursor c = {view.buf, view.len, 0};
    const unsigned char *p = view.buf;
    rec_t r;
    hkey ks[RUN];
    Py_ssize_t at[RUN];
    int64_t offs[RUN];
    unsigned char tomb[RUN];
    Py_ssize_t i = 0;
    while (i < count) {
        int k = 0;
        for (; i < count && k < RUN; i++) {
            if (next_record(&c, &r, NULL)) goto malformed;
            int64_t off = base + r.od;
            int t = r.vs < 0;
            if (off > latest) out[i] = t ? BEYOND_TOMBSTONE : BEYOND;
            else if (r.ks < 0) out[i] = KEYLESS;
            else {
                hash_key(m, p + r.ks, (size_t)(r.ke - r.ks), &ks[k]);
                at[k] = i; offs[k] = off; tomb[k++] = (unsigned char)t;
            }
        }
        for (int j = 0; j < k; j++)
            out[at[j]] = offs[j] < get(m, &ks[j]) ? SUPERSEDED : tomb[j] ? LATEST_TOMBSTONE : LATEST;
    }
    if (c.pos == view.len) goto done;
malformed:
    Py_CLEAR(res);
    res = Py_None;
    Py_INCREF(res);
done:
    PyBuffer_Release(&view);
    return res;
}

/* ------------------------------------------------------------------------------ the kept records */

static inline uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int vsize(uint64_t v) { int k = 1; while (v >= 0x80) { v >>= 7; k++; } return k; }
static inline char *put_uv(char *d, uint64_t v) {
    while (v >= 0x80) { *d++ = (char)((v & 0x7F) | 0x80); v >>= 7; }
    *d++ = (char)v;
    return d;
}
/* a length or -1 (null), as a zigzag varint */
static inline char *put_len(char *d, Py_ssize_t s, Py_ssize_t e) { return put_uv(d, zz(s < 0 ? -1 : e - s)); }
static inline int len_size(Py_ssize_t s, Py_ssize_t e) { return vsize(zz(s < 0 ? -1 : e - s)); }

PyObject *retained_records(PyObject *self, PyObject *args) {
    Py_buffer view, cls;
    Py_ssize_t count;
    unsigned int mask;
    long long base_ts, max_ts;
    int lat;
    PyObject *horizon_o;
    if (!PyArg_ParseTuple(args, "y*ny*ILpLO", &view, &count, &cls, &mask, &base_ts, &lat, &max_ts, &horizon_o))
        return NULL;
    PyObject *res = NULL;
    obuf o = {0};
    hdr_buf hb = {0};
    int has_horizon = horizon_o != Py_None;
    long long horizon = 0;
    if (has_horizon) {
        int of = 0;
        horizon = PyLong_AsLongLongAndOverflow(horizon_o, &of);
        if (horizon == -1 && PyErr_Occurred()) goto done;
        if (of) goto defer;
    }
    if (count < 0 || cls.len != count) goto defer;
    const unsigned char *p = view.buf, *classes = cls.buf;
    cursor c = {p, view.len, 0};
    rec_t r;
    int64_t new_base = 0, top = INT64_MIN, last_delta = -1;
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int rc = next_record(&c, &r, &hb);
        if (rc < 0) goto done;
        if (rc) goto defer;
        if (classes[i] > 31 || !((mask >> classes[i]) & 1)) continue;
        int64_t ts;
        if (lat) ts = max_ts;
        else if (__builtin_add_overflow((int64_t)base_ts, r.tsd, &ts)) goto defer;
        if (!kept) new_base = has_horizon ? horizon : ts;
        int64_t d;
        if (__builtin_sub_overflow(ts, new_base, &d)) goto defer;
        if (ts > top) top = ts;
        last_delta = r.od;
        /* the record after its length: attributes, timestamp delta, offset delta, key, value, headers */
        Py_ssize_t size = 1 + vsize(zz(d)) + vsize(zz(r.od)) + len_size(r.ks, r.ke) + (r.ks < 0 ? 0 : r.ke - r.ks)
                          + len_size(r.vs, r.ve) + (r.vs < 0 ? 0 : r.ve - r.vs) + vsize(zz(r.hc));
        for (int64_t h = 0; h < r.hc; h++) {
            const Py_ssize_t *q = hb.h + 4 * h;
            size += len_size(q[0], q[1]) + (q[1] - q[0]) + len_size(q[2], q[3]) + (q[2] < 0 ? 0 : q[3] - q[2]);
        }
        if (ob_reserve(&o, size + 5)) goto done;
        char *w = put_uv(o.p + o.n, zz(size));
        *w++ = 0;
        w = put_uv(w, zz(d));
        w = put_uv(w, zz(r.od));
        w = put_len(w, r.ks, r.ke);
        if (r.ks >= 0) { memcpy(w, p + r.ks, r.ke - r.ks); w += r.ke - r.ks; }
        w = put_len(w, r.vs, r.ve);
        if (r.vs >= 0) { memcpy(w, p + r.vs, r.ve - r.vs); w += r.ve - r.vs; }
        w = put_uv(w, zz(r.hc));
        for (int64_t h = 0; h < r.hc; h++) {
            const Py_ssize_t *q = hb.h + 4 * h;
            w = put_len(w, q[0], q[1]);
            memcpy(w, p + q[0], q[1] - q[0]); w += q[1] - q[0];
            w = put_len(w, q[2], q[3]);
            if (q[2] >= 0) { memcpy(w, p + q[2], q[3] - q[2]); w += q[3] - q[2]; }
        }
        o.n = w - o.p;
        kept++;
    }
    if (c.pos != view.len) goto defer;
    res = Py_BuildValue("(y#nLLL)", o.p ? o.p : "", o.n, kept, (long long)new_base, (long long)top,
                        (long long)last_delta);
    goto done;
defer:
    res = Py_None;
    Py_INCREF(res);
done:
    PyMem_Free(o.p);
    PyMem_Free(hb.h);
    PyBuffer_Release(&view);
    PyBuffer_Release(&cls);
    return res;
}

/* siphash_test(data, seed16, out16) -> (h0, h1): the hash alone, for the tests (the paper's vectors) */
PyObject *siphash_test(PyObject *self, PyObject *args) {
    Py_buffer data, seed;
    int out16;
    if (!PyArg_ParseTuple(args, "y*y*p", &data, &seed, &out16)) return NULL;
    PyObject *res = NULL;
    if (seed.len != 16) {
        PyErr_SetString(PyExc_ValueError, "16 seed bytes");
    } else {
        uint64_t h0 = 0, h1 = 0;
        siphash(data.buf, (size_t)data.len, le64(seed.buf), le64((const unsigned char *)seed.buf + 8), out16,
                &h0, &h1);
        res = Py_BuildValue("(KK)", (unsigned long long)h0, (unsigned long long)h1);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&seed);
    return res;
}
