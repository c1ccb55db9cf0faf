/*
 * jsonl.c: append's JSON-lines reader (kltool.jsonl) and its Appender.add() loop
 * (kltool.storage.write.appender): the plain lines of the record schema in C, the rest deferred to
 * the pure-Python reader (the reference: its results and its error messages).
 *
 * parse_json_lines(block, skip[, stop]) -> (items, deferred)
 * fill_records(items, i, records, lines, partition, override, first_line, now, rec_overhead,
 *              batch_overhead, est, batch_bytes, batch_records, headers_ok, skip) -> (i, est, skipped)
 */
#include "speedups.h"

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
    int have_ts = 0, have_part = 0, have_type = 0, have_ctrl = 0, skipit = 0, other_type = 0;
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
                if (!NAME_IS(tv, tk, "record")) skipit = other_type = 1;
            }
        } else if (NAME_IS(nm, nk, "control")) {
            if (have_ctrl++) { rc = DEFER; goto fail; }
            if (c.i < c.n && p[c.i] == 'n') { if (jlit(&c, "null")) { rc = DEFER; goto fail; } }
            else {
                if ((rc = jskip(&c, 1))) goto fail;
                skipit = 1;
            }
        } else if (NAME_IS(nm, nk, "offset") || NAME_IS(nm, nk, "timestamp_type") || NAME_IS(nm, nk, "sequence") ||
                   NAME_IS(nm, nk, "size") || NAME_IS(nm, nk, "batch_offset") || NAME_IS(nm, nk, "topic") ||
                   NAME_IS(nm, nk, "decoded") || NAME_IS(nm, nk, "decode_error")) {
            /* the other fields of dump's record (jsonl.RECORD_FIELDS): read back, not used */
            if ((rc = jskip(&c, 1))) goto fail;
        } else if (skipit) {  /* a line that is not a record (a batch, a finding ...): its fields are its own */
            if ((rc = jskip(&c, 1))) goto fail;
        } else {
            rc = DEFER;  /* an unknown field (a typo?): jsonl.parse_record_line says so, or lets it through */
            goto fail;
        }
        jws(&c);
        if (c.i < c.n && p[c.i] == ',') { c.i++; jws(&c); continue; }
        if (c.i < c.n && p[c.i] == '}') { c.i++; break; }
        rc = DEFER;
        goto fail;
    }
end:
    if (c.i != c.n) { rc = DEFER; goto fail; }
    if (other_type && (f[0] || f[1])) { rc = DEFER; goto fail; }  /* "type": "recrod" with a key or value */
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
PyObject *parse_json_lines(PyObject *self, PyObject *args) {
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
PyObject *fill_records(PyObject *self, PyObject *args) {
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
