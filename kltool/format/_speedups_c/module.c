/*
 * module.c: kltool.format._speedups, the optional C accelerator of kltool (built by setup.py from the
 * sources of this directory, one extension module; kltool/format/speedups.py loads it and checks its
 * ABI; kltool/format/_speedups.pyi types its entry points). Every compiled path has a pure-Python
 * twin that stays the reference; the tests run both. One file per concern:
 *
 *   crc.c      CRC-32C (SSE4.2 or slice-by-8): crc32c, hw_crc
 *   walk.c     the batch walker's fast path: walk_v2
 *   decode.c   v2 records into columns: decode_v2
 *   format.c   dump --records' text and JSON lines: format_v2
 *   encode.c   append's record encoder: encode_records
 *   jsonl.c    append's JSON-lines reader and Appender.add(): parse_json_lines, fill_records
 *   arrow.c    the Spark reader's Arrow column buffers: arrow_v2, arrow_records
 *   offmap.c   compact's offset map and record filter: offmap_*, retained_records (siphash_test: tests)
 *   speedups.h the declarations they share
 */
#include "speedups.h"

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
    {"format_v2", (PyCFunction)(void (*)(void))format_v2, METH_VARARGS | METH_KEYWORDS, "The dump --records lines (text or JSON) of a v2 payload."},
    {"offmap_new", offmap_new, METH_VARARGS, "A new offset map of n 24-byte cells, keyed by 16 seed bytes (compact)."},
    {"offmap_len", offmap_len, METH_O, "The distinct keys an offset map holds."},
    {"offmap_get", offmap_get, METH_VARARGS, "A key's offset in the map (-1: absent)."},
    {"offmap_put_key", offmap_put_key, METH_VARARGS, "Put one key's offset in the map."},
    {"offmap_put", offmap_put, METH_VARARGS, "Put the keyed records of a v2 payload in the map (index where it filled, -1, None: malformed)."},
    {"offmap_classes", offmap_classes, METH_VARARGS, "One class byte per record of a v2 payload against the map (None: malformed)."},
    {"retained_records", retained_records, METH_VARARGS, "The records of a v2 payload whose class is kept, re-encoded (None: Python does it)."},
    {"siphash_test", siphash_test, METH_VARARGS, "SipHash-2-4 (128- or 64-bit) of data with a 16-byte key (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kltool.format._speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "ABI", KL_SPEEDUPS_ABI) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
