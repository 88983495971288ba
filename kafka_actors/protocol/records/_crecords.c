/*
 * kafka_actors.protocol.records._crecords: the native record path (CPython C API).
 *
 * Owns: the per-batch loop of kafka_actors/protocol/records/decode.py in C (batch header, CRC32C,
 * varints, keys/values/headers, control batches, read_committed filtering of aborted
 * transactions, fetch-offset trimming, LogAppendTime, truncated tail) filling the columns of a
 * DecodedRecords, and the creation of ConsumerRecord tuples from those columns.
 *
 * It produces exactly what records.py's pure path produces (same columns, same typed errors);
 * records.py is the specification and tests/records/test_native.py checks both against each
 * other. Decompression is not done here: every compressed section is handed to records.py's
 * _decompress (so its checks apply to both paths).
 *
 * Built by setup.py as an optional extension: when it does not compile, records.py uses its
 * pure-Python path and says so (records.IMPLEMENTATION, NATIVE_UNAVAILABLE_REASON).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define KA_HAVE_SSE42 1
#include <nmmintrin.h>
#endif

/* ---- CRC32C (Castagnoli): slice-by-8 tables, SSE4.2 when the CPU has it -------------------- */

static uint32_t crc_tab[8][256];
static int crc_hw = 0;
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_shift_long[4][256], crc_shift_short[4][256];
static void crc_shift_table(uint32_t t[4][256], size_t n);

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
    crc_shift_table(crc_shift_long, CRC_LONG);
    crc_shift_table(crc_shift_short, CRC_SHORT);
#ifdef KA_HAVE_SSE42
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}

static uint32_t
crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
#if !PY_BIG_ENDIAN
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_tab[7][w & 0xff] ^ crc_tab[6][(w >> 8) & 0xff] ^
              crc_tab[5][(w >> 16) & 0xff] ^ crc_tab[4][(w >> 24) & 0xff] ^
              crc_tab[3][(w >> 32) & 0xff] ^ crc_tab[2][(w >> 40) & 0xff] ^
              crc_tab[1][(w >> 48) & 0xff] ^ crc_tab[0][w >> 56];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* The CRC instruction takes 3 cycles and can start one per cycle: one stream of it waits on
 * itself. crc32c_hw runs three streams over three adjacent blocks at once and joins them:
 * the CRC register is linear, so the register after A then B is shift(reg(A), |B|) ^ reg0(B)
 * (reg0: from a zero register), where shift multiplies by x^(8 |B|) modulo the polynomial:
 * four table lookups, with tables made at import for the two block sizes used. */
#define CRC_POLY 0x82F63B78u /* reflected: bit 31 is x^0 */
/* a * b modulo the polynomial (reflected). */
static uint32_t
gf2_mul(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (int i = 0; i < 32; i++) {
        if (a & (0x80000000u >> i))
            prod ^= b;
        b = (b & 1) ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return prod;
}

/* x^(8 n) modulo the polynomial (reflected). */
static uint32_t
x_pow_8n(size_t n)
{
    uint32_t r = 0x80000000u;   /* 1 */
    uint32_t sq = 0x00800000u;  /* x^8 */
    for (; n; n >>= 1) {
        if (n & 1)
            r = gf2_mul(r, sq);
        sq = gf2_mul(sq, sq);
    }
    return r;
}

static void
crc_shift_table(uint32_t t[4][256], size_t n)
{
    uint32_t k = x_pow_8n(n);
    for (int j = 0; j < 4; j++)
        for (uint32_t b = 0; b < 256; b++)
            t[j][b] = gf2_mul(k, b << (8 * j));
}

/* The register `c` moved past n zero bytes (the n the table was made for). */
static inline uint32_t
crc_shift(uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

#ifdef KA_HAVE_SSE42
/* The register `c` past p[0 : 3 blk], the three blocks read at once and joined (`t` shifts
 * by blk bytes). */
__attribute__((target("sse4.2"))) static inline uint64_t
crc32c_hw3(uint64_t c, const uint8_t *p, size_t blk, uint32_t t[4][256])
{
    uint64_t c1 = 0, c2 = 0;
    for (const uint8_t *e = p + blk; p < e; p += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p, 8);
        memcpy(&w1, p + blk, 8);
        memcpy(&w2, p + 2 * blk, 8);
        c = _mm_crc32_u64(c, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    c = crc_shift(t, (uint32_t)c) ^ (uint32_t)c1;
    return crc_shift(t, (uint32_t)c) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    for (; n >= 3 * CRC_LONG; p += 3 * CRC_LONG, n -= 3 * CRC_LONG)
        c = crc32c_hw3(c, p, CRC_LONG, crc_shift_long);
    for (; n >= 3 * CRC_SHORT; p += 3 * CRC_SHORT, n -= 3 * CRC_SHORT)
        c = crc32c_hw3(c, p, CRC_SHORT, crc_shift_short);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static uint32_t
crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
#ifdef KA_HAVE_SSE42
    if (crc_hw)
        return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

/* ---- module state (set once by records.py through setup()) -------------------------------- */

static PyTypeObject *record_type = NULL;  /* ConsumerRecord (a tuple subclass) */
static PyObject *ts_create = NULL;        /* TimestampType.CREATE_TIME */
static PyObject *ts_log_append = NULL;    /* TimestampType.LOG_APPEND_TIME */
static PyObject *corrupt_error = NULL;    /* errors.CorruptRecordError */
static PyObject *unsupported_error = NULL;/* errors.UnsupportedRecordFormatError */
static PyObject *internal_corrupt = NULL; /* records._Corrupt */
static PyObject *internal_too_large = NULL; /* records._TooLarge (a _Corrupt) */
static PyObject *too_large_error = NULL;  /* errors.DecompressedBatchTooLargeError */
static PyObject *malformed_types = NULL;  /* exception types the pure path reports as malformed */
static PyObject *empty_tuple = NULL;

/* ---- reading helpers ---------------------------------------------------------------------- */

static inline uint64_t
be64(const uint8_t *p)
{
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
           ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
           ((uint64_t)p[6] << 8) | (uint64_t)p[7];
}

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Why a batch is corrupt (NULL: a Python exception is set instead). */
typedef struct {
    char msg[160];
    int too_large; /* past the decompression bound: DecompressedBatchTooLargeError */
    int full;      /* the Arrow sink's binary columns are full (bin_put) */
} Fault;

/* Record why a batch is corrupt; returns 1 (the "corrupt" result of the readers below). */
static int
FAULT(Fault *f, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyOS_vsnprintf(f->msg, sizeof(f->msg), format, va);
    va_end(va);
    return 1;
}

/* A zigzag varint/varlong at *pos, not reading at or past end. 0 ok, 1 corrupt. */
static inline int
read_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out, Fault *f)
{
    Py_ssize_t p = *pos;
    if (p < end && b[p] < 0x80) {
        uint64_t raw = b[p];
        *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t raw = 0;
    int shift = 0;
    *out = 0;
    for (int i = 0; i < 10; i++, p++) {
        if (p >= end)
            return FAULT(f, "varint runs past the end of the records");
        uint8_t x = b[p];
        if (i == 9 && x > 1)
            return FAULT(f, "%s", x & 0x80 ? "varint longer than 10 bytes" : "varint overflows 64 bits");
        raw |= (uint64_t)(x & 0x7f) << shift;
        if (x < 0x80) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = p + 1;
            return 0;
        }
        shift += 7;
    }
    return FAULT(f, "varint longer than 10 bytes"); /* not reached */
}

/* a + b as a Python int (exact, also past int64). */
static PyObject *
sum_to_int(int64_t a, int64_t b)
{
    int64_t r;
    if (!__builtin_add_overflow(a, b, &r))
        return PyLong_FromLongLong(r);
    PyObject *x = PyLong_FromLongLong(a), *y = PyLong_FromLongLong(b), *s = NULL;
    if (x && y)
        s = PyNumber_Add(x, y);
    Py_XDECREF(x);
    Py_XDECREF(y);
    return s;
}

/* ---- LazyRecords: a partition's records kept as spans, built into ConsumerRecords on use ---- */

/* One record: its fields as C values and spans into a buffer the LazyRecords holds. */
typedef struct {
    int64_t offset, ts;
    const char *key, *value; /* NULL: None */
    const char *headers;     /* the checked header block; NULL: no headers */
    PyObject *big;           /* owned; NULL, or (offset, timestamp) as ints when past int64 */
    Py_ssize_t key_len, value_len, headers_len;
} Span;

/* One batch that yielded records: records batches[j-1].end .. end-1 are its (owned refs). */
typedef struct {
    Py_ssize_t end;
    PyObject *ts_type, *epoch;
} SpanBatch;

/* DecodedRecords.materialized on the native path: a read-only sequence of ConsumerRecords.
 * Decoding stores only spans (no Python object per record but the parsed headers); each
 * record is built when it is read, so a consumer's records are created when a poll hands
 * them out, and iterating builds one at a time (hot in cache). Only records of complete
 * batches are visible (a batch that failed half-way leaves spans past the last end). */
typedef struct {
    PyObject_HEAD
    PyObject *topic, *partition;
    Span *spans;
    Py_ssize_t n, cap;
    SpanBatch *batches;
    Py_ssize_t nb, capb;
    Py_buffer *bufs; /* the buffers the spans point into, exported until dealloc */
    Py_ssize_t nbufs, capbufs;
} LazyRecords;

static PyTypeObject LazyRecordsType;
static void lazy_truncate(LazyRecords *L, Py_ssize_t n);

/* Grow *arr (of *cap items of `size` bytes) to hold one more than n. 0 ok, -1 MemoryError. */
static int
grow(void **arr, Py_ssize_t *cap, Py_ssize_t n, size_t size)
{
    if (n < *cap)
        return 0;
    Py_ssize_t want = *cap ? *cap * 2 : 64;
    if (want <= n || (size_t)want > PY_SSIZE_T_MAX / size) {
        PyErr_NoMemory();
        return -1;
    }
    void *p = PyMem_Realloc(*arr, (size_t)want * size);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *arr = p;
    *cap = want;
    return 0;
}

/* Keep `obj`'s buffer exported for the spans' lifetime: 0 ok, -1 error. *out: its data. */
static int
lazy_keep_buffer(LazyRecords *L, Py_buffer *view)
{
    if (grow((void **)&L->bufs, &L->capbufs, L->nbufs, sizeof(Py_buffer)) < 0)
        return -1;
    L->bufs[L->nbufs++] = *view; /* moved: released at dealloc */
    return 0;
}

static inline Py_ssize_t
lazy_visible(LazyRecords *L)
{
    return L->nb ? L->batches[L->nb - 1].end : 0;
}

/* The output columns of one DecodedRecords (new references). */
typedef struct {
    PyObject *offsets, *timestamps, *keys, *values, *headers;
    PyObject *batch_ends, *batch_ts_types, *batch_epochs;
    /* DecodedRecords.materialized: when a list, records go there as ConsumerRecords (built
     * here) instead of into the five record columns. */
    PyObject *materialized;
    /* borrowed, for the records built: */
    PyObject *topic, *partition, *batch_ts_type, *batch_epoch;
    /* decode_into(..., columnar=True): records go to this Arrow sink instead (no objects). */
    struct Arrow_ *arrow;
    /* DecodedRecords.materialized is a LazyRecords: records go there as spans. */
    LazyRecords *lazy;
} Columns;

static Py_ssize_t arrow_len(struct Arrow_ *a);

static inline Py_ssize_t
columns_len(Columns *c)
{
    if (c->arrow)
        return arrow_len(c->arrow);
    if (c->lazy)
        return c->lazy->n;
    return PyList_GET_SIZE(c->materialized ? c->materialized : c->offsets);
}

static PyObject *new_record(PyObject *items[9]);

static void
columns_clear(Columns *c)
{
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->timestamps);
    Py_CLEAR(c->keys);
    Py_CLEAR(c->values);
    Py_CLEAR(c->headers);
    Py_CLEAR(c->batch_ends);
    Py_CLEAR(c->batch_ts_types);
    Py_CLEAR(c->batch_epochs);
    Py_CLEAR(c->materialized);
    Py_CLEAR(c->lazy);
}

static PyObject *
get_list(PyObject *obj, const char *name)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (v && !PyList_Check(v)) {
        PyErr_Format(PyExc_TypeError, "DecodedRecords.%s is not a list", name);
        Py_CLEAR(v);
    }
    return v;
}

static int
columns_get(PyObject *out, Columns *c)
{
    memset(c, 0, sizeof(*c));
    if (!(c->offsets = get_list(out, "offsets")) ||
        !(c->timestamps = get_list(out, "timestamps")) || !(c->keys = get_list(out, "keys")) ||
        !(c->values = get_list(out, "values")) || !(c->headers = get_list(out, "headers")) ||
        !(c->batch_ends = get_list(out, "batch_ends")) ||
        !(c->batch_ts_types = get_list(out, "batch_timestamp_types")) ||
        !(c->batch_epochs = get_list(out, "batch_leader_epochs"))) {
        columns_clear(c);
        return -1;
    }
    PyObject *m = PyObject_GetAttrString(out, "materialized");
    if (m == NULL) {
        PyErr_Clear(); /* an object without the attribute: columns only */
    } else if (m == Py_None) {
        Py_DECREF(m);
    } else if (Py_IS_TYPE(m, &LazyRecordsType)) {
        c->lazy = (LazyRecords *)m;
    } else if (!PyList_Check(m)) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_TypeError, "DecodedRecords.materialized is not a list or LazyRecords");
        columns_clear(c);
        return -1;
    } else {
        c->materialized = m;
    }
    return 0;
}

static inline int
append_steal(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* Header keys seen in one batch (producers repeat the same few): their str objects. */
#define KEY_CACHE_SIZE 8
typedef struct {
    int n;
    const uint8_t *bytes[KEY_CACHE_SIZE]; /* into the batch's buffer, alive while it is */
    Py_ssize_t len[KEY_CACHE_SIZE];
    PyObject *str[KEY_CACHE_SIZE];
} KeyCache;

static void
key_cache_clear(KeyCache *kc)
{
    for (int i = 0; i < kc->n; i++)
        Py_DECREF(kc->str[i]);
    kc->n = 0;
}

/* The header key b[0:len] as a str (new reference). */
static PyObject *
header_key(KeyCache *kc, const uint8_t *b, Py_ssize_t len)
{
    for (int i = 0; i < kc->n; i++) {
        if (kc->len[i] == len && memcmp(kc->bytes[i], b, (size_t)len) == 0) {
            Py_INCREF(kc->str[i]);
            return kc->str[i];
        }
    }
    PyObject *key = PyUnicode_DecodeUTF8((const char *)b, len, "replace");
    if (key != NULL && kc->n < KEY_CACHE_SIZE) {
        kc->bytes[kc->n] = b;
        kc->len[kc->n] = len;
        kc->str[kc->n] = key;
        Py_INCREF(key);
        kc->n++;
    }
    return key;
}

/* ---- the fields of one record, as spans into its batch's buffer -------------------------- */

/* The header count at b[*pos] (bounded by the bytes left): 0 ok, 1 corrupt. */
static inline int
read_header_count(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *n, Fault *f)
{
    if (read_varint(b, pos, end, n, f))
        return 1;
    if (*n < 0 || *n > end - *pos)
        return FAULT(f, "bad header count %lld", (long long)*n);
    return 0;
}

/* One header of the block: key b[*key:*key+klen], value (vlen -1: null). 0 ok, 1 corrupt. */
static inline int
read_header(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t *key,
            Py_ssize_t *klen, Py_ssize_t *value, Py_ssize_t *vlen, Fault *f)
{
    int64_t size;
    if (read_varint(b, pos, end, &size, f))
        return 1;
    if (size < 0 || size > end - *pos)
        return FAULT(f, "bad header key length %lld", (long long)size);
    *key = *pos;
    *klen = (Py_ssize_t)size;
    *pos += (Py_ssize_t)size;
    if (*pos < end && b[*pos] == 1) {
        *value = *pos;
        *vlen = -1;
        (*pos)++;
        return 0;
    }
    if (read_varint(b, pos, end, &size, f))
        return 1;
    if (size < 0 || size > end - *pos)
        return FAULT(f, "bad header value length %lld", (long long)size);
    *value = *pos;
    *vlen = (Py_ssize_t)size;
    *pos += (Py_ssize_t)size;
    return 0;
}

/* Parse the header block b[pos:end] exactly: 0 ok (*out a new tuple), 1 corrupt, -1 error. */
static int
parse_headers(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, PyObject **out, Fault *f,
              KeyCache *kc)
{
    int64_t n;
    if (read_header_count(b, &pos, end, &n, f))
        return 1;
    PyObject *tuple = PyTuple_New((Py_ssize_t)n);
    if (tuple == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
        Py_ssize_t k = 0, klen = 0, v = 0, vlen = 0;
        if (read_header(b, &pos, end, &k, &klen, &v, &vlen, f))
            goto corrupt;
        PyObject *key = header_key(kc, b + k, klen);
        if (key == NULL)
            goto error;
        PyObject *value;
        if (vlen < 0) {
            value = Py_None;
            Py_INCREF(value);
        } else if ((value = PyBytes_FromStringAndSize((const char *)b + v, vlen)) == NULL) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair); /* only a str and bytes/None: no cycle through it */
        PyTuple_SET_ITEM(tuple, i, pair);
    }
    PyObject_GC_UnTrack(tuple);
    if (pos != end) {
        FAULT(f, "record size does not match its fields (at byte %zd)", end);
        goto corrupt;
    }
    *out = tuple;
    return 0;
corrupt:
    Py_DECREF(tuple);
    return 1;
error:
    Py_DECREF(tuple);
    return -1;
}

/* Check the header block b[pos:end] as parse_headers reads it, making no object: 0 ok, 1
 * corrupt (the same fault parse_headers gives). */
static int
check_headers(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Fault *f)
{
    int64_t n;
    if (read_header_count(b, &pos, end, &n, f))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        Py_ssize_t k, klen, v, vlen;
        if (read_header(b, &pos, end, &k, &klen, &v, &vlen, f))
            return 1;
    }
    if (pos != end)
        return FAULT(f, "record size does not match its fields (at byte %zd)", end);
    return 0;
}

/* A length-prefixed nullable byte string (key or value): b[*start:*start+*len], *len -1 when
 * null. 0 ok, 1 corrupt. */
static inline int
read_span(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t limit, Py_ssize_t *start,
          Py_ssize_t *len, const char *what, Fault *f)
{
    Py_ssize_t p = *pos;
    int64_t n = 0;
    if (p >= limit)
        return FAULT(f, "record ends before its %s", what);
    if (b[p] == 1) { /* -1: null */
        *pos = p + 1;
        *start = p + 1;
        *len = -1;
        return 0;
    }
    if (read_varint(b, &p, limit, &n, f))
        return 1;
    if (n < 0 || n > limit - p)
        return FAULT(f, "bad %s length %lld", what, (long long)n);
    *start = p;
    *len = (Py_ssize_t)n;
    *pos = p + (Py_ssize_t)n;
    return 0;
}

/* One record of a batch: its deltas, key and value spans, and its header block. */
typedef struct {
    int64_t ts_delta, off_delta;
    Py_ssize_t key, key_len, value, value_len; /* len -1: null */
    Py_ssize_t headers, end;                   /* header block b[headers:end] */
    int no_headers;                            /* the block is the single byte 0 */
} RecordSpan;

/* Parse the record at b[*pos] (record `i` of `count`, the batch ending at `end`) into `r`;
 * *pos moves past it. 0 ok, 1 corrupt. Both record sinks below use it. */
static inline int
parse_record(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t i, int64_t count,
             RecordSpan *r, Fault *f)
{
    Py_ssize_t p = *pos;
    int64_t length;
    if (p >= end)
        return FAULT(f, "%lld records expected, %lld found", (long long)count, (long long)i);
    if (read_varint(b, &p, end, &length, f))
        return 1;
    if (length < 0 || length > end - p)
        return FAULT(f, "bad record length %lld", (long long)length);
    Py_ssize_t record_end = p + (Py_ssize_t)length;
    p++; /* attributes (unused) */
    if (read_varint(b, &p, record_end, &r->ts_delta, f) ||
        read_varint(b, &p, record_end, &r->off_delta, f) ||
        read_span(b, &p, record_end, &r->key, &r->key_len, "key", f) ||
        read_span(b, &p, record_end, &r->value, &r->value_len, "value", f))
        return 1;
    if (p >= record_end)
        return FAULT(f, "record ends before its headers");
    r->no_headers = b[p] == 0;
    if (r->no_headers && p + 1 != record_end)
        return FAULT(f, "record size does not match its fields (at byte %zd)", record_end);
    r->headers = p;
    r->end = record_end;
    *pos = record_end;
    return 0;
}

static inline PyObject *
span_bytes(const uint8_t *b, Py_ssize_t start, Py_ssize_t len)
{
    if (len < 0) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    return PyBytes_FromStringAndSize((const char *)b + start, len);
}

/* Add the kept record `r` of the batch in b as a span: 0 ok, -1 error. */
static int
lazy_add(LazyRecords *L, const uint8_t *b, RecordSpan *r, int64_t offset, int ovf,
         int64_t base_offset, int64_t base_ts, int log_append, int64_t max_ts)
{
    if (grow((void **)&L->spans, &L->cap, L->n, sizeof(Span)) < 0)
        return -1;
    Span *s = &L->spans[L->n];
    int ts_ovf = 0;
    if (log_append)
        s->ts = max_ts;
    else
        ts_ovf = __builtin_add_overflow(base_ts, r->ts_delta, &s->ts);
    s->offset = offset;
    s->key = r->key_len < 0 ? NULL : (const char *)b + r->key;
    s->key_len = r->key_len;
    s->value = r->value_len < 0 ? NULL : (const char *)b + r->value;
    s->value_len = r->value_len;
    s->headers = r->no_headers ? NULL : (const char *)b + r->headers;
    s->headers_len = r->end - r->headers;
    s->big = NULL;
    if (ovf || ts_ovf) { /* past int64: the exact ints, as the pure path has them */
        PyObject *o = ovf ? sum_to_int(base_offset, r->off_delta) : PyLong_FromLongLong(offset);
        PyObject *t = ts_ovf ? sum_to_int(base_ts, r->ts_delta) : PyLong_FromLongLong(s->ts);
        s->big = o && t ? PyTuple_Pack(2, o, t) : NULL;
        Py_XDECREF(o);
        Py_XDECREF(t);
        if (s->big == NULL)
            return -1;
    }
    L->n++;
    return 0;
}

/* Decode the `count` records of b[pos:end] into the columns (see records.py's
 * _decode_batch_records, the trimming of _drop_below and LogAppendTime): 0 ok, 1 corrupt, -1
 * error. Records are appended only when they are kept. */
static int
decode_batch_records(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t count,
                     int64_t base_offset, int64_t base_ts, int log_append, int64_t max_ts,
                     int64_t fetch_offset, Columns *c, Fault *f)
{
    int dropping = base_offset < fetch_offset;
    PyObject *last_headers = NULL; /* the last parsed header block, reused when repeated */
    const uint8_t *last_block = NULL;
    Py_ssize_t last_len = 0;
    PyObject *max_ts_obj = NULL;
    /* Records produced in the same millisecond share a timestamp: one int object for a run. */
    PyObject *last_ts_obj = NULL;
    int64_t last_ts_delta = 0;
    KeyCache keys;
    keys.n = 0;
    int rc = 0;
    if (log_append && (max_ts_obj = PyLong_FromLongLong(max_ts)) == NULL)
        return -1;
    for (int64_t i = 0; i < count; i++) {
        RecordSpan r = {0};
        if ((rc = parse_record(b, &pos, end, i, count, &r, f)))
            goto done;
        int64_t offset;
        int ovf = __builtin_add_overflow(base_offset, r.off_delta, &offset);
        int keep = 1;
        if (dropping) {
            int below = ovf ? r.off_delta < 0 : offset < fetch_offset;
            if (below)
                keep = 0;
            else
                dropping = 0;
        }
        if (c->lazy != NULL) { /* headers are made when the record is built */
            if (!r.no_headers && (rc = check_headers(b, r.headers, r.end, f)))
                goto done;
            if (keep && (rc = lazy_add(c->lazy, b, &r, offset, ovf, base_offset, base_ts,
                                       log_append, max_ts)))
                goto done;
            continue;
        }
        PyObject *headers = NULL;
        if (r.no_headers) {
            headers = empty_tuple;
            Py_INCREF(headers);
        } else {
            Py_ssize_t len = r.end - r.headers;
            if (last_headers != NULL && len == last_len &&
                memcmp(b + r.headers, last_block, len) == 0) {
                headers = last_headers;
                Py_INCREF(headers);
            } else {
                rc = parse_headers(b, r.headers, r.end, &headers, f, &keys);
                if (rc)
                    goto done;
                Py_XSETREF(last_headers, headers);
                Py_INCREF(headers);
                last_block = b + r.headers;
                last_len = len;
            }
        }
        if (!keep) {
            Py_DECREF(headers);
            continue;
        }
        PyObject *key = span_bytes(b, r.key, r.key_len);
        PyObject *value = key ? span_bytes(b, r.value, r.value_len) : NULL;
        PyObject *off_obj = ovf ? sum_to_int(base_offset, r.off_delta) : PyLong_FromLongLong(offset);
        PyObject *ts_obj;
        if (log_append) {
            ts_obj = max_ts_obj;
            Py_INCREF(ts_obj);
        } else if (last_ts_obj != NULL && r.ts_delta == last_ts_delta) {
            ts_obj = last_ts_obj;
            Py_INCREF(ts_obj);
        } else {
            ts_obj = sum_to_int(base_ts, r.ts_delta);
            if (ts_obj != NULL) {
                Py_XSETREF(last_ts_obj, ts_obj);
                Py_INCREF(ts_obj);
                last_ts_delta = r.ts_delta;
            }
        }
        int ok;
        if (!key || !value) {
            ok = 0;
        } else if (c->materialized != NULL) {
            PyObject *rec = NULL;
            if (off_obj && ts_obj) {
                PyObject *items[9] = {c->topic,   c->partition,  off_obj, ts_obj,       c->batch_ts_type,
                                      key,        value,         headers, c->batch_epoch};
                rec = new_record(items);
            }
            ok = rec != NULL && PyList_Append(c->materialized, rec) == 0;
            Py_XDECREF(rec);
        } else {
            ok = off_obj && ts_obj && PyList_Append(c->offsets, off_obj) == 0 &&
                 PyList_Append(c->timestamps, ts_obj) == 0 && PyList_Append(c->keys, key) == 0 &&
                 PyList_Append(c->values, value) == 0 && PyList_Append(c->headers, headers) == 0;
        }
        Py_XDECREF(off_obj);
        Py_XDECREF(ts_obj);
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_DECREF(headers);
        if (!ok) {
            rc = -1;
            goto done;
        }
    }
    if (pos != end)
        rc = FAULT(f, "%zd bytes left after the last of %lld records", end - pos,
                   (long long)count);
done:
    Py_XDECREF(last_headers);
    Py_XDECREF(max_ts_obj);
    Py_XDECREF(last_ts_obj);
    key_cache_clear(&keys);
    return rc;
}

/* ---- the Arrow sink: records as Arrow buffers, no Python object per record ---------------- */

/* A growable byte buffer, kept in a bytes object: handed out as it is when the decode ends
 * (buf_bytes: shrunk to its length, not copied). */
typedef struct {
    PyObject *obj; /* the bytes object (NULL: nothing allocated yet) */
    char *p;       /* its bytes */
    Py_ssize_t len, cap;
} Buf;

/* Large buffers ask for transparent huge pages (where the kernel gives them on request):
 * one fault per 2 MiB instead of one per 4 KiB page written, the decode's main kernel cost. */
#define HUGE_PAGE ((uintptr_t)2 << 20)

static void
buf_advise(Buf *b)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (b->cap < (Py_ssize_t)(2 * HUGE_PAGE))
        return;
    uintptr_t lo = ((uintptr_t)b->p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)b->p + (uintptr_t)b->cap) & ~(HUGE_PAGE - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* advice only: errors ignored */
#else
    (void)b;
#endif
}

/* Make room for `extra` more bytes: exactly when `exact`, else at least doubling. */
static int
buf_reserve(Buf *b, Py_ssize_t extra, int exact)
{
    if (extra > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    Py_ssize_t cap = need;
    if (!exact) {
        cap = b->cap ? b->cap : 256;
        while (cap < need) {
            if (cap > PY_SSIZE_T_MAX / 2) {
                PyErr_NoMemory();
                return -1;
            }
            cap *= 2;
        }
    }
    if (b->obj == NULL) {
        if ((b->obj = PyBytes_FromStringAndSize(NULL, cap)) == NULL)
            return -1;
    } else if (_PyBytes_Resize(&b->obj, cap) < 0) {
        b->p = NULL;
        b->len = b->cap = 0;
        return -1;
    }
    b->p = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    buf_advise(b);
    return 0;
}

static inline int
buf_grow(Buf *b, Py_ssize_t extra)
{
    return buf_reserve(b, extra, 0);
}

static inline int
buf_put(Buf *b, const void *data, Py_ssize_t n)
{
    if (b->len + n > b->cap && buf_grow(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->p + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

static inline int
buf_i64(Buf *b, int64_t v)
{
    return buf_put(b, &v, 8);
}

static inline int
buf_i32(Buf *b, int32_t v)
{
    return buf_put(b, &v, 4);
}

/* Append bit `n` (0-based) of a validity bitmap (Arrow: LSB first). */
static inline int
bit_put(Buf *b, Py_ssize_t n, int set)
{
    Py_ssize_t byte = n >> 3;
    if (byte >= b->len) {
        if (buf_grow(b, 1) < 0)
            return -1;
        b->p[b->len++] = 0;
    }
    if (set)
        b->p[byte] |= (char)(1 << (n & 7));
    else
        b->p[byte] &= (char)~(1 << (n & 7));
    return 0;
}

/* The most data bytes of one binary column (Arrow's int32 offsets); lowered by tests only. */
static Py_ssize_t column_limit = INT32_MAX;

/* A nullable binary column: validity bitmap, int32 offsets (n+1), data. */
typedef struct {
    Buf valid, offs, data;
    Py_ssize_t nulls;
} BinCol;

enum { BIN_KEY, BIN_VALUE, BIN_HEADER_KEY, BIN_HEADER_VALUE, N_BIN };

typedef struct Arrow_ {
    Py_ssize_t n;     /* records */
    Py_ssize_t nh;    /* headers */
    Buf offsets;      /* int64 per record */
    Buf timestamps;   /* int64 microseconds per record (Spark's timestamp unit) */
    Buf ts_types;     /* int32 per record */
    Buf header_offs;  /* int32 (n+1): the list offsets of the headers column */
    BinCol bin[N_BIN];
} Arrow;

static Py_ssize_t
arrow_len(struct Arrow_ *a)
{
    return a->n;
}

/* Where an Arrow sink's columns end: restored when a batch fails half-way. */
typedef struct {
    Py_ssize_t n, nh, lens[4], bin_lens[N_BIN][3], nulls[N_BIN];
} ArrowMark;

static void
arrow_free(Arrow *a)
{
    Py_CLEAR(a->offsets.obj);
    Py_CLEAR(a->timestamps.obj);
    Py_CLEAR(a->ts_types.obj);
    Py_CLEAR(a->header_offs.obj);
    for (int i = 0; i < N_BIN; i++) {
        Py_CLEAR(a->bin[i].valid.obj);
        Py_CLEAR(a->bin[i].offs.obj);
        Py_CLEAR(a->bin[i].data.obj);
    }
    memset(a, 0, sizeof(*a));
}

static int
arrow_init(Arrow *a)
{
    memset(a, 0, sizeof(*a));
    if (buf_i32(&a->header_offs, 0) < 0)
        return -1;
    for (int i = 0; i < N_BIN; i++)
        if (buf_i32(&a->bin[i].offs, 0) < 0)
            return -1;
    return 0;
}

static void
arrow_mark(Arrow *a, ArrowMark *m)
{
    m->n = a->n;
    m->nh = a->nh;
    m->lens[0] = a->offsets.len;
    m->lens[1] = a->timestamps.len;
    m->lens[2] = a->ts_types.len;
    m->lens[3] = a->header_offs.len;
    for (int i = 0; i < N_BIN; i++) {
        m->bin_lens[i][0] = a->bin[i].valid.len;
        m->bin_lens[i][1] = a->bin[i].offs.len;
        m->bin_lens[i][2] = a->bin[i].data.len;
        m->nulls[i] = a->bin[i].nulls;
    }
}

static void
arrow_reset(Arrow *a, const ArrowMark *m)
{
    a->n = m->n;
    a->nh = m->nh;
    a->offsets.len = m->lens[0];
    a->timestamps.len = m->lens[1];
    a->ts_types.len = m->lens[2];
    a->header_offs.len = m->lens[3];
    for (int i = 0; i < N_BIN; i++) {
        a->bin[i].valid.len = m->bin_lens[i][0];
        a->bin[i].offs.len = m->bin_lens[i][1];
        a->bin[i].data.len = m->bin_lens[i][2];
        a->bin[i].nulls = m->nulls[i];
    }
}

/* Append value number `row` of a binary column (len -1: null). 0 ok, 1 corrupt (past the
 * 2 GiB an Arrow binary column holds), -1 error. */
static inline int
bin_put(BinCol *c, Py_ssize_t row, const uint8_t *data, Py_ssize_t len, Fault *f)
{
    if (bit_put(&c->valid, row, len >= 0) < 0)
        return -1;
    if (len < 0) {
        c->nulls++;
        len = 0;
    }
    if (c->data.len + len > column_limit) {
        f->full = 1;
        return FAULT(f, "one batch holds more than the 2 GiB of keys, values or headers an "
                        "Arrow binary column holds");
    }
    if (buf_put(&c->data, data, len) < 0 || buf_i32(&c->offs, (int32_t)c->data.len) < 0)
        return -1;
    return 0;
}

/* The UTF-8 bytes Python's decode("utf-8", "replace") gives for b[0:len] (a header key is a
 * str on the record path): the same bytes when valid, else with U+FFFD. New bytes or NULL. */
static PyObject *
utf8_replaced(const uint8_t *b, Py_ssize_t len)
{
    PyObject *s = PyUnicode_DecodeUTF8((const char *)b, len, "replace");
    if (s == NULL)
        return NULL;
    PyObject *u = PyUnicode_AsUTF8String(s);
    Py_DECREF(s);
    return u;
}

static inline int
utf8_valid(const uint8_t *b, Py_ssize_t len)
{
    Py_ssize_t i = 0;
    while (i < len) {
        uint8_t x = b[i];
        if (x < 0x80) {
            i++;
            continue;
        }
        int n;
        uint32_t cp;
        if ((x & 0xE0) == 0xC0) {
            n = 1;
            cp = x & 0x1F;
        } else if ((x & 0xF0) == 0xE0) {
            n = 2;
            cp = x & 0x0F;
        } else if ((x & 0xF8) == 0xF0) {
            n = 3;
            cp = x & 0x07;
        } else {
            return 0;
        }
        for (int k = 1; k <= n; k++) {
            if (i + k >= len || (b[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (b[i + k] & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

/* Append the header block b[pos:end] of record `row` (exactly as parse_headers reads it):
 * 0 ok, 1 corrupt, -1 error. */
static int
arrow_headers(Arrow *a, const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Fault *f)
{
    int64_t n;
    if (read_header_count(b, &pos, end, &n, f))
        return 1;
    for (int64_t i = 0; i < n; i++) {
        Py_ssize_t k = 0, klen = 0, v = 0, vlen = 0;
        int rc;
        if (read_header(b, &pos, end, &k, &klen, &v, &vlen, f))
            return 1;
        if (utf8_valid(b + k, klen)) {
            rc = bin_put(&a->bin[BIN_HEADER_KEY], a->nh, b + k, klen, f);
        } else {
            PyObject *u = utf8_replaced(b + k, klen);
            if (u == NULL)
                return -1;
            rc = bin_put(&a->bin[BIN_HEADER_KEY], a->nh, (const uint8_t *)PyBytes_AS_STRING(u),
                         PyBytes_GET_SIZE(u), f);
            Py_DECREF(u);
        }
        if (rc || (rc = bin_put(&a->bin[BIN_HEADER_VALUE], a->nh, b + v, vlen, f)))
            return rc;
        a->nh++;
    }
    if (pos != end)
        return FAULT(f, "record size does not match its fields (at byte %zd)", end);
    if (a->nh > INT32_MAX)
        return FAULT(f, "one fetch's records hold more than 2**31 headers");
    return 0;
}

/* decode_batch_records, into an Arrow sink: 0 ok, 1 corrupt, -1 error. A kept record whose
 * offset is past int64 (only in a malformed batch: the last offset was checked) or whose
 * timestamp's microseconds leave int64 is corrupt here (the columns cannot hold it); a record
 * dropped below the fetch offset is checked only as the record path checks it (its offset and
 * timestamp are not put in a column). */
static int
decode_batch_arrow(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t count,
                   int64_t base_offset, int64_t base_ts, int log_append, int64_t max_ts,
                   int64_t fetch_offset, Arrow *a, Fault *f)
{
    int dropping = base_offset < fetch_offset;
    int32_t ts_type = log_append ? 1 : 0;
    int rc;
    for (int64_t i = 0; i < count; i++) {
        RecordSpan r = {0};
        if ((rc = parse_record(b, &pos, end, i, count, &r, f)))
            return rc;
        int64_t offset, ts;
        int ovf = __builtin_add_overflow(base_offset, r.off_delta, &offset);
        if (dropping) {
            if (ovf ? r.off_delta < 0 : offset < fetch_offset) { /* as decode_batch_records */
                if (!r.no_headers) { /* checked as the record path checks it */
                    ArrowMark m;
                    arrow_mark(a, &m);
                    rc = arrow_headers(a, b, r.headers, r.end, f);
                    arrow_reset(a, &m);
                    if (rc)
                        return rc;
                }
                continue;
            }
            dropping = 0;
        }
        if (ovf)
            return FAULT(f, "record offset overflows int64");
        if (log_append)
            ts = max_ts;
        else if (__builtin_add_overflow(base_ts, r.ts_delta, &ts))
            return FAULT(f, "record timestamp overflows int64");
        if (__builtin_mul_overflow(ts, (int64_t)1000, &ts))
            return FAULT(f, "record timestamp is out of the range of a microsecond timestamp");
        if (!r.no_headers && (rc = arrow_headers(a, b, r.headers, r.end, f)))
            return rc;
        if ((rc = bin_put(&a->bin[BIN_KEY], a->n, b + r.key, r.key_len, f)) ||
            (rc = bin_put(&a->bin[BIN_VALUE], a->n, b + r.value, r.value_len, f)))
            return rc;
        if (buf_i64(&a->offsets, offset) < 0 || buf_i64(&a->timestamps, ts) < 0 ||
            buf_i32(&a->ts_types, ts_type) < 0 || buf_i32(&a->header_offs, (int32_t)a->nh) < 0)
            return -1;
        a->n++;
    }
    if (pos != end)
        return FAULT(f, "%zd bytes left after the last of %lld records", end - pos,
                     (long long)count);
    return 0;
}

/* The buffer's bytes object, shrunk to its length (no copy: the buffer gives it away). */
static PyObject *
buf_bytes(Buf *b)
{
    if (b->obj == NULL)
        return PyBytes_FromStringAndSize("", 0);
    if (b->len != b->cap && _PyBytes_Resize(&b->obj, b->len) < 0) {
        b->p = NULL;
        b->len = b->cap = 0;
        return NULL;
    }
    PyObject *r = b->obj;
    b->obj = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    return r;
}

/* The topic column (`n` times the topic's UTF-8 bytes: int32 offsets, data) and the partition
 * column (int32), into slots i, i+1, i+2 of tuple `t`. 0 ok, -1 error. */
static int
constant_columns(PyObject *t, Py_ssize_t i, Py_ssize_t n, PyObject *topic, PyObject *partition)
{
    Py_ssize_t len;
    const char *name = PyUnicode_AsUTF8AndSize(topic, &len);
    long part = PyLong_AsLong(partition);
    if (name == NULL || (part == -1 && PyErr_Occurred()))
        return -1;
    if (len && n > INT32_MAX / len) {
        PyErr_SetString(PyExc_OverflowError, "the topic column would pass 2 GiB");
        return -1;
    }
    PyObject *offs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *data = PyBytes_FromStringAndSize(NULL, n * len);
    PyObject *parts = PyBytes_FromStringAndSize(NULL, n * 4);
    if (offs == NULL || data == NULL || parts == NULL) {
        Py_XDECREF(offs);
        Py_XDECREF(data);
        Py_XDECREF(parts);
        return -1;
    }
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offs);
    char *d = PyBytes_AS_STRING(data);
    int32_t *pp = (int32_t *)PyBytes_AS_STRING(parts);
    for (Py_ssize_t k = 0; k <= n; k++)
        o[k] = (int32_t)(k * len);
    for (Py_ssize_t k = 0; k < n; k++) {
        memcpy(d + k * len, name, (size_t)len);
        pp[k] = (int32_t)part;
    }
    PyTuple_SET_ITEM(t, i, offs);
    PyTuple_SET_ITEM(t, i + 1, data);
    PyTuple_SET_ITEM(t, i + 2, parts);
    return 0;
}

/* The sink's buffers as Python bytes, set as DecodedRecords.native_columns:
 * (n, offsets, timestamps (microseconds), timestamp_types, header_offsets, n_headers,
 *  then per binary column (key, value, header key, header value): validity or None, offsets,
 *  data; then the topic column's offsets and data, the partition column). Every buffer is in
 *  Arrow's layout: records.py and protocol/arrow.py wrap them, making no Python object per
 *  record and calling nothing of pyarrow that gives the GIL up. 0 ok, -1 error. */
static int
arrow_export(Arrow *a, PyObject *out, PyObject *topic, PyObject *partition)
{
    PyObject *t = PyTuple_New(6 + 3 * N_BIN + 3);
    if (t == NULL)
        return -1;
    if (constant_columns(t, 6 + 3 * N_BIN, a->n, topic, partition) < 0) {
        Py_DECREF(t);
        return -1;
    }
    PyTuple_SET_ITEM(t, 0, PyLong_FromSsize_t(a->n));
    PyTuple_SET_ITEM(t, 1, buf_bytes(&a->offsets));
    PyTuple_SET_ITEM(t, 2, buf_bytes(&a->timestamps));
    PyTuple_SET_ITEM(t, 3, buf_bytes(&a->ts_types));
    PyTuple_SET_ITEM(t, 4, buf_bytes(&a->header_offs));
    PyTuple_SET_ITEM(t, 5, PyLong_FromSsize_t(a->nh));
    for (int i = 0; i < N_BIN; i++) {
        BinCol *c = &a->bin[i];
        PyObject *valid;
        if (c->nulls) {
            valid = buf_bytes(&c->valid);
        } else {
            valid = Py_None;
            Py_INCREF(valid);
        }
        PyTuple_SET_ITEM(t, 6 + 3 * i, valid);
        PyTuple_SET_ITEM(t, 7 + 3 * i, buf_bytes(&c->offs));
        PyTuple_SET_ITEM(t, 8 + 3 * i, buf_bytes(&c->data));
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        if (PyTuple_GET_ITEM(t, i) == NULL) {
            Py_DECREF(t);
            return -1;
        }
    }
    int rc = PyObject_SetAttrString(out, "native_columns", t);
    Py_DECREF(t);
    return rc;
}

/* The ControlRecordType id of the first record of b[pos:end] (-1: no record): 0 ok, 1 corrupt. */
static int
control_type(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int *ctype, Fault *f)
{
    int64_t v, key_length;
    *ctype = -1;
    if (pos >= end)
        return 0;
    if (read_varint(b, &pos, end, &v, f))
        return 1;
    pos++; /* attributes */
    if (read_varint(b, &pos, end, &v, f) || read_varint(b, &pos, end, &v, f) ||
        read_varint(b, &pos, end, &key_length, f))
        return 1;
    if (key_length < 4 || key_length > end - pos)
        return FAULT(f, "bad control record key length %lld", (long long)key_length);
    *ctype = (int16_t)(((uint16_t)b[pos + 2] << 8) | b[pos + 3]);
    return 0;
}

/* Hand a compressed section to records.py's _decompress: a new reference to its result (a
 * bytes-like object) or NULL with *corrupt set (a Fault) or not (a Python error). */
static PyObject *
decompress_section(PyObject *decompress, PyObject *view, int codec, Py_ssize_t start,
                   Py_ssize_t end, Fault *f, int *corrupt)
{
    *corrupt = 0;
    PyObject *section = PySequence_GetSlice(view, start, end);
    if (section == NULL)
        return NULL;
    PyObject *res = PyObject_CallFunction(decompress, "iO", codec, section);
    Py_DECREF(section);
    if (res != NULL)
        return res;
    int is_internal = PyErr_ExceptionMatches(internal_corrupt);
    f->too_large = PyErr_ExceptionMatches(internal_too_large);
    if (!is_internal && !PyErr_ExceptionMatches(malformed_types))
        return NULL; /* anything else (a typed error of the decompressor) propagates */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    if (s == NULL)
        PyErr_Clear();
    if (is_internal)
        PyOS_snprintf(f->msg, sizeof(f->msg), "%s", s ? s : "decompression failed");
    else
        PyOS_snprintf(f->msg, sizeof(f->msg), "malformed batch: %s: %s",
                      ((PyTypeObject *)type)->tp_name, s ? s : "");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    *corrupt = 1;
    return NULL;
}

/* Set `cls(message, topic=, partition=, offset=)` as the current exception. */
static void
raise_typed(PyObject *cls, const char *message, PyObject *topic, PyObject *partition,
            int64_t offset)
{
    PyObject *kw = Py_BuildValue("{s:O,s:O,s:L}", "topic", topic, "partition", partition,
                                 "offset", (long long)offset);
    PyObject *args = Py_BuildValue("(s)", message);
    if (kw && args) {
        PyObject *exc = PyObject_Call(cls, args, kw);
        if (exc) {
            PyErr_SetObject(cls, exc);
            Py_DECREF(exc);
        }
    }
    Py_XDECREF(kw);
    Py_XDECREF(args);
}

static int
set_position(PyObject *out, int64_t next_fetch_offset, Py_ssize_t consumed)
{
    PyObject *a = PyLong_FromLongLong(next_fetch_offset);
    PyObject *b = PyLong_FromSsize_t(consumed);
    int rc = -1;
    if (a && b && PyObject_SetAttrString(out, "next_fetch_offset", a) == 0 &&
        PyObject_SetAttrString(out, "bytes_consumed", b) == 0)
        rc = 0;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return rc;
}

#define BATCH_HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define LEGACY_RECORD_OVERHEAD_V0 14
#define CRC_START 21

PyDoc_STRVAR(decode_into_doc,
"decode_into(buf, out, fetch_offset, check_crcs, read_committed, aborted, decompress,\n"
"            columnar=False)\n--\n\n"
"records.py's _decode_into in C. ``buf``: bytes or a read-only contiguous buffer (a view of a\n"
"received frame), which the records' spans keep exported. ``aborted``: (first_offset,\n"
"producer_id) pairs sorted by first_offset; ``decompress(codec, memoryview) -> bytes``.\n"
"``columnar``: the records go to ``out.native_columns`` as Arrow buffers (see arrow_export),\n"
"not to the record columns; on a typed error too, holding the records of the batches before\n"
"the bad one.");

static PyObject *
decode_into(PyObject *self, PyObject *args)
{
    PyObject *bufobj, *out, *aborted, *decompress;
    long long fetch_offset;
    int check_crcs, read_committed, columnar = 0;
    if (!PyArg_ParseTuple(args, "OOLppOO|p:decode_into", &bufobj, &out, &fetch_offset,
                          &check_crcs, &read_committed, &aborted, &decompress, &columnar))
        return NULL;
    if (!PyList_Check(aborted)) {
        PyErr_SetString(PyExc_TypeError, "aborted must be a list");
        return NULL;
    }
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_crecords.setup() was not called");
        return NULL;
    }
    /* bytes, or a read-only view of a received frame (its records then need no copy): held
     * for the decoding; the records' spans keep their own export of it (lazy_keep_buffer) */
    Py_buffer input;
    if (PyObject_GetBuffer(bufobj, &input, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!input.readonly) {
        PyBuffer_Release(&input);
        PyErr_SetString(PyExc_TypeError, "buf must be bytes or a read-only buffer");
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)input.buf;
    Py_ssize_t total = input.len;
    Columns c;
    PyObject *topic = NULL, *partition = NULL, *view = NULL, *aborted_producers = NULL;
    PyObject *result = NULL;
    Fault fault = {{0}, 0};
    int64_t base_offset = 0;
    Py_ssize_t pos = 0;
    Py_ssize_t n_aborted = PyList_GET_SIZE(aborted), next_aborted = 0;
    Arrow arrow;
    ArrowMark good = {0}; /* where the sink's columns end after the last complete batch */
    if (columnar && arrow_init(&arrow) < 0) {
        arrow_free(&arrow);
        PyBuffer_Release(&input);
        return NULL;
    }
    if (columns_get(out, &c) < 0) {
        if (columnar)
            arrow_free(&arrow);
        PyBuffer_Release(&input);
        return NULL;
    }
    if (columnar) {
        c.arrow = &arrow;
        arrow_mark(&arrow, &good);
    }
    topic = PyObject_GetAttrString(out, "topic");
    partition = PyObject_GetAttrString(out, "partition");
    c.topic = topic;
    c.partition = partition;
    PyObject *nfo_obj = PyObject_GetAttrString(out, "next_fetch_offset");
    int64_t next_fetch_offset = nfo_obj ? PyLong_AsLongLong(nfo_obj) : -1;
    Py_XDECREF(nfo_obj);
    if (!topic || !partition || PyErr_Occurred())
        goto error;
    if (read_committed && (aborted_producers = PySet_New(NULL)) == NULL)
        goto error;
    if (c.lazy != NULL) {
        Py_buffer whole;
        if (c.lazy->topic == NULL) {
            Py_INCREF(topic);
            c.lazy->topic = topic;
            Py_INCREF(partition);
            c.lazy->partition = partition;
        }
        if (PyObject_GetBuffer(bufobj, &whole, PyBUF_SIMPLE) < 0)
            goto error;
        if (lazy_keep_buffer(c.lazy, &whole) < 0) {
            PyBuffer_Release(&whole);
            goto error;
        }
    }

    while (total - pos >= LOG_OVERHEAD) {
        if (set_position(out, next_fetch_offset, pos) < 0)
            goto error;
        if (columnar)
            arrow_mark(&arrow, &good);
        const uint8_t *h = buf + pos;
        base_offset = (int64_t)be64(h);
        int32_t batch_length = (int32_t)be32(h + 8);
        if (batch_length < LEGACY_RECORD_OVERHEAD_V0) {
            FAULT(&fault, "batch length %d is too small", batch_length);
            goto corrupt;
        }
        Py_ssize_t end = pos + LOG_OVERHEAD + batch_length;
        if (end > total)
            break; /* trailing truncated batch: the next fetch gets it whole */
        uint8_t magic = h[16];
        if (magic != 2) {
            if (magic == 0 || magic == 1) {
                FAULT(&fault, "message format v%d is not supported", magic);
                raise_typed(unsupported_error, fault.msg, topic, partition, base_offset);
                goto error;
            }
            FAULT(&fault, "invalid magic %d", magic);
            goto corrupt;
        }
        if (end - pos < BATCH_HEADER_SIZE) {
            FAULT(&fault, "batch length %d is too small", batch_length);
            goto corrupt;
        }
        int32_t leader_epoch = (int32_t)be32(h + 12);
        uint32_t crc = be32(h + 17);
        int attributes = (int16_t)(((uint16_t)h[21] << 8) | h[22]);
        int32_t last_offset_delta = (int32_t)be32(h + 23);
        int64_t base_ts = (int64_t)be64(h + 27);
        int64_t max_ts = (int64_t)be64(h + 35);
        int64_t producer_id = (int64_t)be64(h + 43);
        int32_t count = (int32_t)be32(h + 57);
        if (check_crcs &&
            crc32c(0, h + CRC_START, (size_t)(end - pos - CRC_START)) != crc) {
            FAULT(&fault, "CRC32C mismatch");
            goto corrupt;
        }
        if (count < 0 || last_offset_delta < 0) {
            FAULT(&fault, "bad record count %d / last offset delta", count);
            goto corrupt;
        }
        int64_t last_offset;
        if (__builtin_add_overflow(base_offset, (int64_t)last_offset_delta, &last_offset) ||
            last_offset == INT64_MAX) {
            FAULT(&fault, "last offset overflows int64");
            goto corrupt;
        }
        int is_control = attributes & 0x20;
        int codec = attributes & 0x07;
        Py_ssize_t records_start = pos + BATCH_HEADER_SIZE;
        int is_corrupt = 0;
        if (codec && view == NULL && (view = PyMemoryView_FromObject(bufobj)) == NULL)
            goto error;
        if (read_committed && producer_id >= 0) {
            while (next_aborted < n_aborted) {
                PyObject *pair = PyList_GET_ITEM(aborted, next_aborted);
                if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                    PyErr_SetString(PyExc_TypeError, "aborted holds (first_offset, producer_id)");
                    goto error;
                }
                long long first = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0));
                if (first == -1 && PyErr_Occurred())
                    goto error;
                if (first > last_offset)
                    break;
                if (PySet_Add(aborted_producers, PyTuple_GET_ITEM(pair, 1)) < 0)
                    goto error;
                next_aborted++;
            }
            PyObject *pid = PyLong_FromLongLong(producer_id);
            if (pid == NULL)
                goto error;
            if (is_control) {
                int ctype;
                if (codec) {
                    PyObject *section = decompress_section(decompress, view, codec,
                                                           records_start, end, &fault,
                                                           &is_corrupt);
                    if (section == NULL) {
                        Py_DECREF(pid);
                        if (is_corrupt)
                            goto corrupt;
                        goto error;
                    }
                    Py_buffer sv;
                    if (PyObject_GetBuffer(section, &sv, PyBUF_SIMPLE) < 0) {
                        Py_DECREF(section);
                        Py_DECREF(pid);
                        goto error;
                    }
                    is_corrupt = control_type(sv.buf, 0, sv.len, &ctype, &fault);
                    PyBuffer_Release(&sv);
                    Py_DECREF(section);
                } else {
                    is_corrupt = control_type(buf, records_start, end, &ctype, &fault);
                }
                if (is_corrupt) {
                    Py_DECREF(pid);
                    goto corrupt;
                }
                if (ctype == 0 && PySet_Discard(aborted_producers, pid) < 0) {
                    Py_DECREF(pid);
                    goto error;
                }
            } else if (attributes & 0x10) {
                int in = PySet_Contains(aborted_producers, pid);
                if (in < 0) {
                    Py_DECREF(pid);
                    goto error;
                }
                if (in)
                    is_control = 1; /* skip like a control batch: aborted data */
            }
            Py_DECREF(pid);
        }
        if (!is_control && last_offset >= fetch_offset && count) {
            Py_ssize_t first = columns_len(&c);
            int log_append = (attributes & 0x08) != 0;
            int rc;
            PyObject *epoch;
            if (leader_epoch >= 0) {
                if ((epoch = PyLong_FromLong(leader_epoch)) == NULL)
                    goto error;
            } else {
                epoch = Py_None;
                Py_INCREF(epoch);
            }
            PyObject *ts_type = log_append ? ts_log_append : ts_create;
            c.batch_ts_type = ts_type;
            c.batch_epoch = epoch;
            if (codec) {
                PyObject *section = decompress_section(decompress, view, codec, records_start,
                                                       end, &fault, &is_corrupt);
                if (section == NULL) {
                    Py_DECREF(epoch);
                    if (is_corrupt)
                        goto corrupt;
                    goto error;
                }
                Py_buffer sv;
                if (PyObject_GetBuffer(section, &sv, PyBUF_SIMPLE) < 0) {
                    Py_DECREF(section);
                    Py_DECREF(epoch);
                    goto error;
                }
                rc = columnar ? decode_batch_arrow(sv.buf, 0, sv.len, count, base_offset,
                                                   base_ts, log_append, max_ts, fetch_offset,
                                                   &arrow, &fault)
                              : decode_batch_records(sv.buf, 0, sv.len, count, base_offset,
                                                     base_ts, log_append, max_ts, fetch_offset,
                                                     &c, &fault);
                /* spans point into the section: the LazyRecords keeps it */
                if (c.lazy != NULL && c.lazy->n > first) {
                    if (lazy_keep_buffer(c.lazy, &sv) < 0) {
                        lazy_truncate(c.lazy, first); /* no span may outlive its buffer */
                        PyBuffer_Release(&sv);
                        rc = -1;
                    }
                } else {
                    PyBuffer_Release(&sv);
                }
                Py_DECREF(section);
            } else {
                rc = columnar ? decode_batch_arrow(buf, records_start, end, count, base_offset,
                                                   base_ts, log_append, max_ts, fetch_offset,
                                                   &arrow, &fault)
                              : decode_batch_records(buf, records_start, end, count, base_offset,
                                                     base_ts, log_append, max_ts, fetch_offset,
                                                     &c, &fault);
            }
            c.batch_ts_type = c.batch_epoch = NULL;
            if (rc) {
                Py_DECREF(epoch);
                if (rc > 0 && fault.full && pos > 0) {
                    /* The columns are full: stop before this batch, as before a truncated
                     * one (the next fetch starts at it). Alone, it is corrupt. */
                    arrow_reset(&arrow, &good);
                    break;
                }
                if (rc > 0)
                    goto corrupt;
                goto error;
            }
            Py_ssize_t n = columns_len(&c);
            if (n > first && c.lazy != NULL) {
                LazyRecords *L = c.lazy;
                if (grow((void **)&L->batches, &L->capb, L->nb, sizeof(SpanBatch)) < 0) {
                    Py_DECREF(epoch);
                    goto error;
                }
                Py_INCREF(ts_type);
                Py_INCREF(epoch);
                L->batches[L->nb].end = n;
                L->batches[L->nb].ts_type = ts_type;
                L->batches[L->nb].epoch = epoch;
                L->nb++;
            }
            if (n > first) {
                Py_INCREF(ts_type);
                if (append_steal(c.batch_ends, PyLong_FromSsize_t(n)) < 0 ||
                    append_steal(c.batch_ts_types, ts_type) < 0 ||
                    append_steal(c.batch_epochs, epoch) < 0)
                    goto error;
            } else {
                Py_DECREF(epoch);
            }
        }
        if (last_offset + 1 > next_fetch_offset)
            next_fetch_offset = last_offset + 1;
        pos = end;
    }
    if (set_position(out, next_fetch_offset, pos) < 0)
        goto error;
    result = Py_None;
    Py_INCREF(result);
    goto done;
corrupt:
    raise_typed(fault.too_large ? too_large_error : corrupt_error, fault.msg, topic, partition,
                base_offset);
error:
done:
    if (columnar) {
        /* the complete batches' records, also when a typed error is raised (partial_on_error) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (result == NULL)
            arrow_reset(&arrow, &good);
        if (topic == NULL || partition == NULL || arrow_export(&arrow, out, topic, partition) < 0) {
            if (et == NULL) {
                Py_CLEAR(result);
            } else {
                PyErr_Clear();
            }
        }
        if (et != NULL)
            PyErr_Restore(et, ev, tb);
        arrow_free(&arrow);
    }
    columns_clear(&c);
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(view);
    Py_XDECREF(aborted_producers);
    PyBuffer_Release(&input);
    return result;
}

/* ---- ConsumerRecord creation -------------------------------------------------------------- */

static inline PyObject *
new_record(PyObject *items[9])
{
#if PY_VERSION_HEX >= 0x030E0000
    /* tuples cache their hash from 3.14 on: go through tuple.__new__ */
    PyObject *t = PyTuple_New(9);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < 9; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    PyObject *a = PyTuple_Pack(1, t);
    Py_DECREF(t);
    if (a == NULL)
        return NULL;
    PyObject *r = PyTuple_Type.tp_new(record_type, a, NULL);
    Py_DECREF(a);
    return r;
#else
    /* Not tracked by the cycle collector (PyObject_GC_NewVar does not track), see below. */
    PyObject *r = (PyObject *)PyObject_GC_NewVar(PyTupleObject, record_type, 9);
    if (r == NULL)
        return NULL;
    for (int i = 0; i < 9; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(r, i, items[i]);
    }
    /* A record holds str, int, bytes, None, an enum member and a tuple of (str, bytes|None)
     * pairs: it cannot be part of a reference cycle, so the cycle collector need not track it
     * (CPython untracks such tuples itself, but only once a collection has walked them). */
    return r;
#endif
}

/* ---- LazyRecords: the sequence type ------------------------------------------------------- */

/* Drop spans n.. (their headers and big ints). */
static void
lazy_truncate(LazyRecords *L, Py_ssize_t n)
{
    for (Py_ssize_t i = n; i < L->n; i++)
        Py_CLEAR(L->spans[i].big);
    if (n < L->n)
        L->n = n;
}

static PyObject *
lazy_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "LazyRecords() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0); /* zeroed */
}

static void
lazy_dealloc(LazyRecords *L)
{
    lazy_truncate(L, 0);
    PyMem_Free(L->spans);
    for (Py_ssize_t j = 0; j < L->nb; j++) {
        Py_DECREF(L->batches[j].ts_type);
        Py_DECREF(L->batches[j].epoch);
    }
    PyMem_Free(L->batches);
    for (Py_ssize_t j = 0; j < L->nbufs; j++)
        PyBuffer_Release(&L->bufs[j]);
    PyMem_Free(L->bufs);
    Py_XDECREF(L->topic);
    Py_XDECREF(L->partition);
    Py_TYPE(L)->tp_free((PyObject *)L);
}

/* Where building records from index i on starts: the batch of i; records of one run share
 * the timestamp int of the record before them when it is the same. */
typedef struct {
    Py_ssize_t batch;
    PyObject *last_ts;
    int64_t last_ts_val;
    PyObject *last_headers; /* the last header block's tuple, reused when repeated */
    const char *last_block;
    Py_ssize_t last_len;
    KeyCache keys;
} Cursor;

static void
cursor_clear(Cursor *cur)
{
    Py_CLEAR(cur->last_ts);
    Py_CLEAR(cur->last_headers);
    key_cache_clear(&cur->keys);
}

static void
cursor_seek(LazyRecords *L, Cursor *cur, Py_ssize_t i)
{
    Py_ssize_t lo = 0, hi = L->nb; /* the first batch whose end is past i */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (L->batches[mid].end <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    cur->batch = lo;
    cur->last_ts = NULL;
    cur->last_ts_val = 0;
    cur->last_headers = NULL;
    cur->last_block = NULL;
    cur->last_len = 0;
    cur->keys.n = 0;
}

/* The headers tuple of span s (a new reference). */
static PyObject *
cursor_headers(Cursor *cur, Span *s)
{
    if (s->headers == NULL)
        return Py_NewRef(empty_tuple);
    if (cur->last_headers != NULL && cur->last_len == s->headers_len &&
        memcmp(cur->last_block, s->headers, (size_t)s->headers_len) == 0)
        return Py_NewRef(cur->last_headers);
    PyObject *h = NULL;
    Fault f;
    int rc = parse_headers((const uint8_t *)s->headers, 0, s->headers_len, &h, &f, &cur->keys);
    if (rc > 0) /* checked while decoding: not reached */
        PyErr_Format(PyExc_SystemError, "header block changed after decoding: %s", f.msg);
    if (rc)
        return NULL;
    Py_XSETREF(cur->last_headers, Py_NewRef(h));
    cur->last_block = s->headers;
    cur->last_len = s->headers_len;
    return h;
}

/* Record i (0 <= i < lazy_visible(L), at or after the cursor's batch start) as a new
 * ConsumerRecord. */
static PyObject *
lazy_build(LazyRecords *L, Py_ssize_t i, Cursor *cur)
{
    while (L->batches[cur->batch].end <= i)
        cur->batch++;
    Span *s = &L->spans[i];
    PyObject *off, *ts;
    if (s->big != NULL) {
        off = PyTuple_GET_ITEM(s->big, 0);
        ts = PyTuple_GET_ITEM(s->big, 1);
        Py_INCREF(off);
        Py_INCREF(ts);
    } else {
        if ((off = PyLong_FromLongLong(s->offset)) == NULL)
            return NULL;
        if (cur->last_ts != NULL && cur->last_ts_val == s->ts) {
            ts = cur->last_ts;
            Py_INCREF(ts);
        } else {
            if ((ts = PyLong_FromLongLong(s->ts)) == NULL) {
                Py_DECREF(off);
                return NULL;
            }
            Py_INCREF(ts);
            Py_XSETREF(cur->last_ts, ts);
            cur->last_ts_val = s->ts;
        }
    }
    PyObject *key = s->key ? PyBytes_FromStringAndSize(s->key, s->key_len) : Py_NewRef(Py_None);
    PyObject *value = NULL, *headers = NULL, *rec = NULL;
    if (key != NULL)
        value = s->value ? PyBytes_FromStringAndSize(s->value, s->value_len) : Py_NewRef(Py_None);
    if (value != NULL)
        headers = cursor_headers(cur, s);
    if (headers != NULL) {
        SpanBatch *b = &L->batches[cur->batch];
        PyObject *items[9] = {L->topic, L->partition, off,     ts,      b->ts_type,
                              key,      value,        headers, b->epoch};
        rec = new_record(items);
    }
    Py_DECREF(off);
    Py_DECREF(ts);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    return rec;
}

/* Records start..end-1 as a new list (0 <= start <= end <= visible). */
static PyObject *
lazy_range(LazyRecords *L, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *list = PyList_New(end - start);
    if (list == NULL || end == start)
        return list;
    Cursor cur;
    cursor_seek(L, &cur, start);
    for (Py_ssize_t i = start; i < end; i++) {
        PyObject *r = lazy_build(L, i, &cur);
        if (r == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i - start, r);
    }
    cursor_clear(&cur);
    return list;
}

static Py_ssize_t
lazy_length(LazyRecords *L)
{
    return lazy_visible(L);
}

static PyObject *
lazy_item(LazyRecords *L, Py_ssize_t i)
{
    if (i < 0 || i >= lazy_visible(L)) {
        PyErr_SetString(PyExc_IndexError, "LazyRecords index out of range");
        return NULL;
    }
    Cursor cur;
    cursor_seek(L, &cur, i);
    PyObject *r = lazy_build(L, i, &cur);
    cursor_clear(&cur);
    return r;
}

static PyObject *
lazy_subscript(LazyRecords *L, PyObject *key)
{
    Py_ssize_t n = lazy_visible(L);
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        return lazy_item(L, i < 0 ? i + n : i);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "LazyRecords indices must be integers or slices, not %.200s",
                     Py_TYPE(key)->tp_name);
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0)
        return NULL;
    Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
    if (step == 1)
        return lazy_range(L, start, start + len);
    PyObject *list = PyList_New(len);
    for (Py_ssize_t k = 0, i = start; list != NULL && k < len; k++, i += step) {
        PyObject *r = lazy_item(L, i);
        if (r == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, k, r);
    }
    return list;
}

PyDoc_STRVAR(lazy_offset_at_doc, "offset_at(i)\n--\n\nThe offset of record i (no record built).");

static PyObject *
lazy_offset_at(LazyRecords *L, PyObject *arg)
{
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0)
        i += lazy_visible(L);
    if (i < 0 || i >= lazy_visible(L)) {
        PyErr_SetString(PyExc_IndexError, "LazyRecords index out of range");
        return NULL;
    }
    Span *s = &L->spans[i];
    if (s->big != NULL)
        return Py_NewRef(PyTuple_GET_ITEM(s->big, 0));
    return PyLong_FromLongLong(s->offset);
}

/* The iterator: builds one record per step. */
typedef struct {
    PyObject_HEAD
    LazyRecords *L;
    Py_ssize_t i, end;
    Cursor cur;
} LazyIter;

static void
lazy_iter_dealloc(LazyIter *it)
{
    cursor_clear(&it->cur);
    Py_XDECREF(it->L);
    Py_TYPE(it)->tp_free((PyObject *)it);
}

static PyObject *
lazy_iter_next(LazyIter *it)
{
    if (it->i >= it->end)
        return NULL;
    PyObject *r = lazy_build(it->L, it->i, &it->cur);
    if (r != NULL)
        it->i++;
    return r;
}

static PyObject *
lazy_iter_length_hint(LazyIter *it, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(it->end - it->i);
}

static PyMethodDef lazy_iter_methods[] = {
    {"__length_hint__", (PyCFunction)lazy_iter_length_hint, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LazyIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_actors.protocol.records._crecords.LazyRecordsIterator",
    .tp_basicsize = sizeof(LazyIter),
    .tp_dealloc = (destructor)lazy_iter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)lazy_iter_next,
    .tp_methods = lazy_iter_methods,
};

static PyObject *
lazy_iter(LazyRecords *L)
{
    LazyIter *it = PyObject_New(LazyIter, &LazyIterType);
    if (it == NULL)
        return NULL;
    Py_INCREF(L);
    it->L = L;
    it->i = 0;
    it->end = lazy_visible(L);
    cursor_seek(L, &it->cur, 0);
    return (PyObject *)it;
}

static PyObject *
lazy_repr(LazyRecords *L)
{
    return PyUnicode_FromFormat("<LazyRecords %zd records>", lazy_visible(L));
}

static PySequenceMethods lazy_as_sequence = {
    .sq_length = (lenfunc)lazy_length,
    .sq_item = (ssizeargfunc)lazy_item,
};

static PyMappingMethods lazy_as_mapping = {
    .mp_length = (lenfunc)lazy_length,
    .mp_subscript = (binaryfunc)lazy_subscript,
};

static PyMethodDef lazy_methods[] = {
    {"offset_at", (PyCFunction)lazy_offset_at, METH_O, lazy_offset_at_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(lazy_doc,
"LazyRecords()\n--\n\n"
"A partition's decoded records (decode_into fills it): a read-only sequence of\n"
"ConsumerRecord, each built when it is read (indexing, slicing to a list, iterating).");

static PyTypeObject LazyRecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_actors.protocol.records._crecords.LazyRecords",
    .tp_basicsize = sizeof(LazyRecords),
    .tp_dealloc = (destructor)lazy_dealloc,
    .tp_repr = (reprfunc)lazy_repr,
    .tp_as_sequence = &lazy_as_sequence,
    .tp_as_mapping = &lazy_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_SEQUENCE,
    .tp_doc = lazy_doc,
    .tp_iter = (getiterfunc)lazy_iter,
    .tp_methods = lazy_methods,
    .tp_new = lazy_new,
};

PyDoc_STRVAR(records_doc,
"records(decoded, start, end)\n--\n\n"
"Records start..end-1 of a DecodedRecords as a list of ConsumerRecord.");

static PyObject *
records(PyObject *self, PyObject *args)
{
    PyObject *decoded;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "Onn:records", &decoded, &start, &end))
        return NULL;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_crecords.setup() was not called");
        return NULL;
    }
    Columns c;
    if (columns_get(decoded, &c) < 0)
        return NULL;
    PyObject *result = NULL;
    PyObject *topic = PyObject_GetAttrString(decoded, "topic");
    PyObject *partition = PyObject_GetAttrString(decoded, "partition");
    if (!topic || !partition)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(c.offsets);
    if (PyList_GET_SIZE(c.timestamps) != n || PyList_GET_SIZE(c.keys) != n ||
        PyList_GET_SIZE(c.values) != n || PyList_GET_SIZE(c.headers) != n) {
        PyErr_SetString(PyExc_ValueError, "DecodedRecords columns differ in length");
        goto done;
    }
    if (start < 0)
        start = 0;
    if (end > n)
        end = n;
    if (end < start)
        end = start;
    Py_ssize_t nb = PyList_GET_SIZE(c.batch_ends);
    if (PyList_GET_SIZE(c.batch_ts_types) != nb || PyList_GET_SIZE(c.batch_epochs) != nb) {
        PyErr_SetString(PyExc_ValueError, "DecodedRecords batch columns differ in length");
        goto done;
    }
    result = PyList_New(end - start);
    if (result == NULL)
        goto done;
    Py_ssize_t batch = 0, batch_end = -1;
    PyObject *items[9] = {NULL};
    items[0] = topic;
    items[1] = partition;
    for (Py_ssize_t i = start; i < end; i++) {
        while (i >= batch_end) {
            if (batch_end >= 0)
                batch++;
            if (batch >= nb) {
                PyErr_SetString(PyExc_ValueError, "DecodedRecords.batch_ends do not cover it");
                Py_CLEAR(result);
                goto done;
            }
            batch_end = PyLong_AsSsize_t(PyList_GET_ITEM(c.batch_ends, batch));
            if (batch_end == -1 && PyErr_Occurred()) {
                Py_CLEAR(result);
                goto done;
            }
            if (i >= batch_end)
                continue;
            items[4] = PyList_GET_ITEM(c.batch_ts_types, batch);
            items[8] = PyList_GET_ITEM(c.batch_epochs, batch);
        }
        items[2] = PyList_GET_ITEM(c.offsets, i);
        items[3] = PyList_GET_ITEM(c.timestamps, i);
        items[5] = PyList_GET_ITEM(c.keys, i);
        items[6] = PyList_GET_ITEM(c.values, i);
        items[7] = PyList_GET_ITEM(c.headers, i);
        PyObject *r = new_record(items);
        if (r == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i - start, r);
    }
done:
    columns_clear(&c);
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    return result;
}

/* ---- the rest of the module --------------------------------------------------------------- */

PyDoc_STRVAR(crc32c_doc, "crc32c(data, crc=0)\n--\n\nCRC32C (Castagnoli) of a bytes-like object.");

static PyObject *
py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned int crc = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c", &view, &crc))
        return NULL;
    uint32_t r;
    Py_BEGIN_ALLOW_THREADS
    r = crc32c(crc, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

PyDoc_STRVAR(setup_doc,
"setup(ConsumerRecord, create_time, log_append_time, CorruptRecordError,\n"
"      UnsupportedRecordFormatError, internal_corrupt, malformed_types,\n"
"      internal_too_large, DecompressedBatchTooLargeError)\n--\n\n"
"Called once by records.py with the types the native path creates and raises.");

static PyObject *
setup(PyObject *self, PyObject *args)
{
    PyObject *rt, *a, *b, *ce, *ue, *ic, *mt, *itl, *tle;
    if (!PyArg_ParseTuple(args, "O!OOOOOO!OO:setup", &PyType_Type, &rt, &a, &b, &ce, &ue, &ic,
                          &PyTuple_Type, &mt, &itl, &tle))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)rt, &PyTuple_Type) ||
        ((PyTypeObject *)rt)->tp_itemsize != PyTuple_Type.tp_itemsize ||
        ((PyTypeObject *)rt)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "ConsumerRecord must be a tuple subclass without slots");
        return NULL;
    }
    Py_INCREF(rt);
    Py_XSETREF(record_type, (PyTypeObject *)rt);
    Py_INCREF(a);
    Py_XSETREF(ts_create, a);
    Py_INCREF(b);
    Py_XSETREF(ts_log_append, b);
    Py_INCREF(ce);
    Py_XSETREF(corrupt_error, ce);
    Py_INCREF(ue);
    Py_XSETREF(unsupported_error, ue);
    Py_INCREF(ic);
    Py_XSETREF(internal_corrupt, ic);
    Py_INCREF(mt);
    Py_XSETREF(malformed_types, mt);
    Py_INCREF(itl);
    Py_XSETREF(internal_too_large, itl);
    Py_INCREF(tle);
    Py_XSETREF(too_large_error, tle);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_column_limit_doc,
"set_column_limit(n)\n--\n\n"
"Tests only: the most data bytes of one Arrow binary column (default 2**31 - 1).");

static PyObject *
set_column_limit(PyObject *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the limit is 0 .. 2**31 - 1");
        return NULL;
    }
    column_limit = n;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_column_limit", set_column_limit, METH_O, set_column_limit_doc},
    {"decode_into", decode_into, METH_VARARGS, decode_into_doc},
    {"records", records, METH_VARARGS, records_doc},
    {"crc32c", py_crc32c, METH_VARARGS, crc32c_doc},
    {"setup", setup, METH_VARARGS, setup_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crecords",
    "The native record path of kafka_actors.protocol.records.decode (see records.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__crecords(void)
{
    crc_init();
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&LazyRecordsType) < 0 || PyType_Ready(&LazyIterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LazyRecordsType);
    if (PyModule_AddObject(m, "LazyRecords", (PyObject *)&LazyRecordsType) < 0) {
        Py_DECREF(&LazyRecordsType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "CRC32C_IMPLEMENTATION", crc_hw ? "sse4.2" : "slice-by-8") <
        0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
