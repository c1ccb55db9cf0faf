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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kltool.format._speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "ABI", KL_SPEEDUPS_ABI) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
