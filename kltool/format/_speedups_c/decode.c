/*
 * decode.c: the record decoder behind kltool.format.batch.decode_v2_records.
 *
 * decode_v2(data, count, base_offset, base_ts, lat, max_ts)
 *   -> (offsets, timestamps, key_starts, key_ends, value_starts, value_ends, headers, sizes, pos, ordered)
 * with the same meaning as RecordColumns; ``ordered`` is true when the offset deltas strictly
 * increase from >= 0. On malformed data it raises ValueError(message, rel_pos) where rel_pos is the
 * start of the record being decoded; the caller turns that into CorruptDataError. The pure-Python
 * decoder stays the reference: tests check both give identical results.
 */
#include "speedups.h"

static PyObject *fail(const char *msg, Py_ssize_t rel) {
    PyObject *args = Py_BuildValue("(sn)", msg, rel);
    if (args) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

#define NLISTS 8

PyObject *decode_v2(PyObject *self, PyObject *args) {
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
