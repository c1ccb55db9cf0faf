/*
 * speedups.h: the private declarations shared by the C sources of kltool.format._speedups
 * (the .c files of kltool/format/_speedups_c/, compiled together into that one extension module by setup.py).
 *
 * Here: the byte cursor and zigzag varint reader, big-endian loads, one v2 record's structure check
 * (next_record, shared by the walker's records_ok and dump's formatter), the growable output buffer
 * of the formatters and the encoder, and the entry points each source file gives module.c. The
 * helpers on hot paths are static inline so that each file's loops keep them inlined.
 * Not installed, not a public interface: kltool/format/_speedups.pyi describes the module's entry points.
 */
#ifndef KLTOOL_SPEEDUPS_H
#define KLTOOL_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

/* The interface version kltool/format/speedups.py expects (ABI there): a stale build is not used. */
#define KL_SPEEDUPS_ABI 13

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    Py_ssize_t pos;
} cursor;


/* 0 ok, -1 past the end, -2 too long */
static inline int read_zigzag(cursor *c, int max_bytes, int64_t *out) {
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

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* ------------------------------------------------------------------------------------------
 * One record of an uncompressed v2 payload, with exactly decode_v2's checks (decode.c): the
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
static inline int next_record(cursor *c, rec_t *r, hdr_buf *hb) {
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

/* ------------------------------------------------------------------------------------------
 * A growable output buffer (PyMem): the formatters (format.c), the encoder (encode.c), the JSON reader.
 */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
} obuf;

static inline int ob_reserve(obuf *o, Py_ssize_t extra) {
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
static inline int ob_i64(obuf *o, int64_t v) {
    char tmp[24];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (ob_reserve(o, k + 1)) return -1;
    if (v < 0) o->p[o->n++] = '-';
    while (k) o->p[o->n++] = tmp[--k];
    return 0;
}

/* Word-at-a-time byte tests (SWAR) of the text scanners (format.c, jsonl.c) */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* bytes of w below n (n <= 128) / above n, as high bits */
#define HAS_LESS(w, n) (((w) - ONES * (n)) & ~(w) & HIGHS)
#define HAS_MORE(w, n) ((((w) + ONES * (127 - (n))) | (w)) & HIGHS)
#define HAS_BYTE(w, b) HAS_LESS((w) ^ (ONES * (b)), 1)

/* crc.c */
uint32_t crc32c_update(uint32_t value, const unsigned char *p, size_t n);
void crc_init(void);
/* format.c: strict UTF-8 (what bytes.decode("utf-8") accepts) */
int utf8_valid(const unsigned char *s, Py_ssize_t n);

/* The entry points, one file per concern (module.c lists them; _speedups.pyi types them). */
PyObject *decode_v2(PyObject *self, PyObject *args);                                  /* decode.c */
PyObject *py_crc32c(PyObject *self, PyObject *args);                                  /* crc.c */
PyObject *py_crc_hw(PyObject *self, PyObject *args);                                  /* crc.c */
PyObject *walk_v2(PyObject *self, PyObject *args);                                    /* walk.c */
PyObject *format_v2(PyObject *self, PyObject *args, PyObject *kwargs);                /* format.c */
PyObject *encode_records(PyObject *self, PyObject *args);                             /* encode.c */
PyObject *parse_json_lines(PyObject *self, PyObject *args);                           /* jsonl.c */
PyObject *fill_records(PyObject *self, PyObject *args);                               /* jsonl.c */
PyObject *arrow_records(PyObject *self, PyObject *args);                              /* arrow.c */
PyObject *arrow_v2(PyObject *self, PyObject *args);                                   /* arrow.c */
PyObject *offmap_new(PyObject *self, PyObject *args);                                 /* offmap.c */
PyObject *offmap_len(PyObject *self, PyObject *arg);                                  /* offmap.c */
PyObject *offmap_get(PyObject *self, PyObject *args);                                 /* offmap.c */
PyObject *offmap_put_key(PyObject *self, PyObject *args);                             /* offmap.c */
PyObject *offmap_put(PyObject *self, PyObject *args);                                 /* offmap.c */
PyObject *offmap_classes(PyObject *self, PyObject *args);                             /* offmap.c */
PyObject *retained_records(PyObject *self, PyObject *args);                           /* offmap.c */
PyObject *siphash_test(PyObject *self, PyObject *args);                               /* offmap.c */

#endif
