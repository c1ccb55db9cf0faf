/*
 * crc.c: CRC-32C (Castagnoli) for the batch CRCs: SSE4.2 crc32 instructions when the CPU has them
 * (checked at run time; three interleaved streams on large inputs), else a slice-by-8 table.
 *
 * crc32c(data, value=0) -> int        the crc32c package's convention (kltool.format.speedups.crc32c)
 * hw_crc([on]) -> bool                whether the SSE4.2 path is used; hw_crc(0) off, hw_crc(1) on (tests)
 * crc32c_update() is what the batch walker (walk.c) calls.
 */
#include "speedups.h"

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

uint32_t crc32c_update(uint32_t value, const unsigned char *p, size_t n) {
    uint32_t crc = ~value;
#if HAVE_HW_CRC
    if (use_hw_crc) return ~crc_hw(crc, p, n);
#endif
    return ~crc_sw(crc, p, n);
}

PyObject *py_crc32c(PyObject *self, PyObject *args) {
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

PyObject *py_crc_hw(PyObject *self, PyObject *args) {
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

/* The tables, and the SSE4.2 path when the CPU has it: once, when the module is created. */
void crc_init(void) {
    crc_init_table();
    crc_init_shift();
#if HAVE_HW_CRC
    use_hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}
