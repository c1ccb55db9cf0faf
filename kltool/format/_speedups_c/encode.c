/*
 * encode.c: the record encoder of append (kltool.format.batch._encode_v2_records in one call).
 */
#include "speedups.h"

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
PyObject *encode_records(PyObject *self, PyObject *args) {
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
