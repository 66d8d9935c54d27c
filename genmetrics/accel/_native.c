/* One pass over two images' rows: per-row sums of squared differences and the range of the values.
 *
 * The optional native kernel of genmetrics.accel.pixel_native.squared_error_sums (psnr at the
 * machine's read bandwidth). torch has no fused "subtract, square, sum per row, min and max of both
 * inputs": with public ops the inputs are read by one op and re-read from the cache by three more. This
 * loop reads each input once.
 *
 * Arithmetic (the same on every CPU and compiler, so the sums are bitwise reproducible; built with
 * -ffp-contract=off so no multiply-add is fused):
 *   float32: a row of W terms is cut into blocks of BLOCK (1024) terms; in a block, the groups of 8 terms go
 *   into 8 float32 lanes (term i into lane i mod 8, in order), and after the block each lane is added to
 *   its float64 lane; the last W mod 8 terms of the row (squared in float32) are added to float64 lanes
 *   0.. in order; the float64 lanes are added in the fixed tree ((0+4)+(1+5))+((2+6)+(3+7)). A float32 lane
 *   never sums more than BLOCK/8 = 128 terms, so the relative error is at most about (BLOCK/8 + 3) eps32,
 *   whatever the row length (float64 adds W/BLOCK + 3 eps64 more).
 *   uint8: differences and squares are integers, summed exactly (16-bit differences, products summed in
 *   pairs into int32: pmaddwd where the compiler finds it, not a 32-bit multiply; rows in int64).
 * The range: float min/max by comparison (NaN never wins a comparison; a NaN in either input makes that
 * row's sum NaN, which the caller sees), byte min/max for uint8.
 *
 * GM_NO_CLONES (one baseline build) and GM_NO_VECTOR (the scalar loop that compilers without vector
 * extensions build) exist for tests/accel/test_pixel_native.py, which checks all builds agree bitwise.
 *
 * The entry points take addresses (torch's data_ptr()) and release the GIL, so the caller can split rows
 * across threads. Plain C, no torch headers: it builds against any torch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && defined(__GLIBC__) && !defined(__INTEL_COMPILER) && \
    !defined(GM_NO_CLONES)
/* AVX-512 (x86-64-v4: F, BW, DQ, VL; AVX-512F where the compiler has no x86-64-v4 clone), AVX2 and baseline (SSE2) builds of the loops, picked at load time by the CPU (ifunc: glibc
   only; musl and other libcs get the baseline build). The float32 loop is written on 8 lanes, so every build
   does the same additions in the same order: the same bits. */
#if !defined(__clang__) && __GNUC__ >= 12
#define GM_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define GM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#elif defined(GM_ONLY_TARGET)
/* one target only (tests build "avx512bw" this way, to compare it with the others where the CPU runs it) */
#define GM_CLONES __attribute__((target(GM_ONLY_TARGET)))
#else
#define GM_CLONES
#endif

#define LANES 8
/* float32 terms per block: a float32 lane sums BLOCK / LANES terms, then goes into a float64 lane */
#define BLOCK 1024

#if defined(__GNUC__) && !defined(GM_NO_VECTOR)
/* 8 float32 lanes as one vector (GCC/Clang vector extensions: one AVX register, or two SSE/NEON ones);
   lane j holds exactly what the scalar loop below would, so both give the same bits */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define GM_VECTOR 1
#endif

/* the smaller (larger) of m and x, per lane, by comparison: m when x is NaN */
#define SCALAR_MIN(m, x) ((x) < (m) ? (x) : (m))
#define SCALAR_MAX(m, x) ((x) > (m) ? (x) : (m))

/* one term into lane j: its squared difference summed, both values into the lane's min and max */
static inline void lane_step(float *acc, float *mn, float *mx, int j, float x, float y) {
    float d = x - y;
    acc[j] = acc[j] + d * d;
    mn[j] = SCALAR_MIN(mn[j], x);
    mx[j] = SCALAR_MAX(mx[j], x);
    mn[j] = SCALAR_MIN(mn[j], y);
    mx[j] = SCALAR_MAX(mx[j], y);
}

GM_CLONES
static void rows_f32(const float *p, const float *t, int64_t rows, int64_t w, double *out, float *range) {
    float lo = range[0], hi = range[1];
    const int64_t full = w - w % LANES; /* terms in groups of 8; the rest is the row's tail */
    for (int64_t r = 0; r < rows; r++) {
        const float *a = p + r * w, *b = t + r * w;
        double dacc[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
        float acc[LANES], mn[LANES], mx[LANES];
        int64_t i = 0;
#ifdef GM_VECTOR
        v8f vmn = {lo, lo, lo, lo, lo, lo, lo, lo}, vmx = {hi, hi, hi, hi, hi, hi, hi, hi};
        while (i < full) {
            int64_t end = (full - i > BLOCK) ? i + BLOCK : full;
            v8f vacc = {0, 0, 0, 0, 0, 0, 0, 0};
            for (; i < end; i += LANES) {
                v8f x, y;
                memcpy(&x, a + i, sizeof x);
                memcpy(&y, b + i, sizeof y);
                v8f d = x - y;
                vacc = vacc + d * d;
                v8i k;
                k = x < vmn;
                vmn = (v8f)(((v8i)x & k) | ((v8i)vmn & ~k));
                k = x > vmx;
                vmx = (v8f)(((v8i)x & k) | ((v8i)vmx & ~k));
                k = y < vmn;
                vmn = (v8f)(((v8i)y & k) | ((v8i)vmn & ~k));
                k = y > vmx;
                vmx = (v8f)(((v8i)y & k) | ((v8i)vmx & ~k));
            }
            memcpy(acc, &vacc, sizeof acc);
            for (int j = 0; j < LANES; j++) dacc[j] += (double)acc[j];
        }
        memcpy(mn, &vmn, sizeof mn);
        memcpy(mx, &vmx, sizeof mx);
#else
        for (int j = 0; j < LANES; j++) {
            mn[j] = lo;
            mx[j] = hi;
        }
        while (i < full) {
            int64_t end = (full - i > BLOCK) ? i + BLOCK : full;
            for (int j = 0; j < LANES; j++) acc[j] = 0.0f;
            for (; i < end; i += LANES) {
                for (int j = 0; j < LANES; j++) lane_step(acc, mn, mx, j, a[i + j], b[i + j]);
            }
            for (int j = 0; j < LANES; j++) dacc[j] += (double)acc[j];
        }
#endif
        for (int j = 0; i < w; i++, j++) { /* the last W mod 8 terms: float32 squares into float64 lanes 0.. */
            acc[j] = 0.0f;
            lane_step(acc, mn, mx, j, a[i], b[i]);
            dacc[j] += (double)acc[j];
        }
        out[r] = ((dacc[0] + dacc[4]) + (dacc[1] + dacc[5])) + ((dacc[2] + dacc[6]) + (dacc[3] + dacc[7]));
        for (int j = 0; j < LANES; j++) {
            lo = SCALAR_MIN(lo, mn[j]);
            hi = SCALAR_MAX(hi, mx[j]);
        }
    }
    range[0] = lo;
    range[1] = hi;
}

GM_CLONES
static void rows_u8(const uint8_t *p, const uint8_t *t, int64_t rows, int64_t w, double *out, float *range) {
    uint8_t lo = (uint8_t)range[0], hi = (uint8_t)range[1];
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *a = p + r * w, *b = t + r * w;
        int64_t total = 0;
        int64_t i = 0;
        while (i < w) {
            /* int32 partial sums: at most 32768 squares of <= 255^2 each, below 2^31 */
            int64_t end = (w - i > 32768) ? i + 32768 : w;
            int32_t part = 0;
            uint8_t mn = lo, mx = hi;
            for (; i < end; i++) {
                /* |d| <= 255 fits 16 bits: a 16 x 16 -> 32-bit product the compiler pairs (pmaddwd) */
                int16_t d = (int16_t)((int16_t)a[i] - (int16_t)b[i]);
                part += (int32_t)d * (int32_t)d;
                mn = a[i] < mn ? a[i] : mn;
                mx = a[i] > mx ? a[i] : mx;
                mn = b[i] < mn ? b[i] : mn;
                mx = b[i] > mx ? b[i] : mx;
            }
            total += part;
            lo = mn;
            hi = mx;
        }
        out[r] = (double)total;
    }
    range[0] = (float)lo;
    range[1] = (float)hi;
}

/* sse_rows(kind, preds_addr, target_addr, rows, width, out_addr) -> (lo, hi)
 *   kind 0: float32 rows; kind 1: uint8 rows. out: float64 [rows], one sum per row. */
static PyObject *sse_rows(PyObject *self, PyObject *args) {
    int kind;
    unsigned long long pa, ta, oa;
    long long rows, w;
    (void)self;
    if (!PyArg_ParseTuple(args, "iKKLLK", &kind, &pa, &ta, &rows, &w, &oa)) return NULL;
    if (rows < 0 || w <= 0 || (kind != 0 && kind != 1) || !pa || !ta || !oa) {
        PyErr_SetString(PyExc_ValueError, "sse_rows: kind must be 0 or 1, rows >= 0, width > 0, addresses set");
        return NULL;
    }
    float range[2];
    if (kind == 0) {
        range[0] = INFINITY;
        range[1] = -INFINITY;
    } else {
        range[0] = 255.0f;
        range[1] = 0.0f;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 0)
        rows_f32((const float *)(uintptr_t)pa, (const float *)(uintptr_t)ta, rows, w, (double *)(uintptr_t)oa, range);
    else
        rows_u8((const uint8_t *)(uintptr_t)pa, (const uint8_t *)(uintptr_t)ta, rows, w, (double *)(uintptr_t)oa, range);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(dd)", (double)range[0], (double)range[1]);
}

static PyMethodDef methods[] = {
    {"sse_rows", sse_rows, METH_VARARGS,
     "sse_rows(kind, preds_addr, target_addr, rows, width, out_addr) -> (lo, hi): per-row sums of squared "
     "differences (float64 out[rows]) and the range of both inputs; kind 0 float32, 1 uint8."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
