/* One pass over two images' rows: per-row sums of squared differences and the range of the values.
 *
 * The optional native kernel of genmetrics.functional.pixel.squared_error_sums (psnr at the
 * machine's read bandwidth). torch has no fused "subtract, square, sum per row, min and max of both
 * inputs": with public ops the inputs are read by one op and re-read from the cache by three more. This
 * loop reads each input once.
 *
 * Arithmetic (the same on every CPU and compiler, so the sums are bitwise reproducible; built with
 * -ffp-contract=off so no multiply-add is fused):
 *   float32: each row of W terms goes into 8 float32 lanes (term i into lane i mod 8, in order), the lanes
 *   are added in the fixed tree ((0+4)+(1+5))+((2+6)+(3+7)); relative error <= (W/8 + 3) eps.
 *   uint8: differences and squares are integers, summed exactly in int64.
 * The range: float min/max by comparison (NaN never wins a comparison; a NaN in either input makes that
 * row's sum NaN, which the caller sees), byte min/max for uint8.
 *
 * GM_NO_CLONES (one baseline build) and GM_NO_VECTOR (the scalar loop that compilers without vector
 * extensions build) exist for tests/functional/test_pixel_native.py, which checks all builds agree bitwise.
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
/* AVX2 and baseline (SSE2) builds of the loops, picked at load time by the CPU (ifunc: glibc only; musl
   and other libcs get the baseline build) */
#define GM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GM_CLONES
#endif

#define LANES 8

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
    for (int64_t r = 0; r < rows; r++) {
        const float *a = p + r * w, *b = t + r * w;
        float acc[LANES], mn[LANES], mx[LANES];
        int64_t i = 0;
#ifdef GM_VECTOR
        v8f vacc = {0, 0, 0, 0, 0, 0, 0, 0};
        v8f vmn = {lo, lo, lo, lo, lo, lo, lo, lo}, vmx = {hi, hi, hi, hi, hi, hi, hi, hi};
        for (; i + LANES <= w; i += LANES) {
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
        memcpy(mn, &vmn, sizeof mn);
        memcpy(mx, &vmx, sizeof mx);
#else
        for (int j = 0; j < LANES; j++) {
            acc[j] = 0.0f;
            mn[j] = lo;
            mx[j] = hi;
        }
        for (; i + LANES <= w; i += LANES) {
            for (int j = 0; j < LANES; j++) lane_step(acc, mn, mx, j, a[i + j], b[i + j]);
        }
#endif
        for (int j = 0; i < w; i++, j++) lane_step(acc, mn, mx, j, a[i], b[i]); /* last W mod 8, lanes 0.. */
        float s04 = acc[0] + acc[4], s15 = acc[1] + acc[5], s26 = acc[2] + acc[6], s37 = acc[3] + acc[7];
        out[r] = (double)((s04 + s15) + (s26 + s37));
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
                int32_t d = (int32_t)a[i] - (int32_t)b[i];
                part += d * d;
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
