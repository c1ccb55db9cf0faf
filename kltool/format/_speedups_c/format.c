/*
 * format.c: dump --records' output (kltool.commands.dump): the kafka-dump-log text lines or the JSON
 * lines of a whole uncompressed (or decompressed) v2 payload in one call, for batches that are not
 * control batches and have no internal-topic decoder. Also strict UTF-8 validation (utf8_valid),
 * which the JSON reader (jsonl.c) shares.
 */
#include "speedups.h"

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
int utf8_valid(const unsigned char *s, Py_ssize_t n) {
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
 * format_v2(data, count, base_offset, base_ts, lat, max_ts, base_seq, *, json=False, encoding=0,
 *           ts_name="CreateTime", suffix="}", from_offset=None, to_offset=None, from_time=None,
 *           to_time=None, key=None, max_records=-1) -> (bytes, emitted) | None
 * The record lines of an uncompressed (or decompressed) v2 payload, as Dumper writes them for a
 * batch that is not a control batch and has no internal-topic decoder. The batch's header fields are
 * positional; how to write them is keyword-only: text (ts_name is "CreateTime"/...) or JSON (ts_name
 * is the JSON timestamp_type; suffix ends each object), encoding 0 text, 1 base64, 2 hex. Records
 * are filtered like RecordFilter.record_matches and at most max_records (-1: all) are written.
 * None when Python must format the batch: malformed records (its decoder gives the error), text
 * that is not printable ASCII (its escaping rules), out-of-int64 values.
 */
PyObject *format_v2(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"", "", "", "", "", "", "", "json", "encoding", "ts_name", "suffix", "from_offset",
                             "to_offset", "from_time", "to_time", "key", "max_records", NULL};
    Py_buffer view;
    long long count, base_offset, base_ts, max_ts, base_seq;
    int lat, json = 0, enc = ENC_TEXT;
    const char *ts_name = "CreateTime", *suffix = "}";
    Py_ssize_t ts_len = 10, suf_len = 1, max_records = -1;
    PyObject *fo = Py_None, *to = Py_None, *fto = Py_None, *tto = Py_None, *keyo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*LLLpLL|$pis#s#OOOOOn", kwlist, &view, &count, &base_offset,
                                     &base_ts, &lat, &max_ts, &base_seq, &json, &enc, &ts_name, &ts_len, &suffix,
                                     &suf_len, &fo, &to, &fto, &tto, &keyo, &max_records))
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
            /* (header values are not printed: kafka-dump-log prints the keys above, then key and payload) */
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
