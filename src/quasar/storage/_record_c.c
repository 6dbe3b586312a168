/* quasar.storage._record_c: the commit log record encoder and the consume queue unit writer, compiled.
 *
 * Compiled twin of _record_py.py (same API, same bytes written, same return values, same exception classes;
 * its docstrings are the specification, record.py documents the layout). The public names are
 * quasar.storage.record.pack_record_into / pack_records_into and quasar.storage.consume_queue's unit writer,
 * which pick a twin with quasar.native.load_twin.
 *
 * Record (RocketMQ CommitLog.DefaultAppendMessageCallback.doAppend, MessageExtEncoder), big-endian:
 *
 *     0 TOTALSIZE i32 | 4 MAGICCODE u32 | 8 BODYCRC i32 | 12 QUEUEID+FLAG (8 bytes, pre-packed)
 *     20 QUEUEOFFSET i64 | 28 PHYSICALOFFSET i64 | 36 SYSFLAG..PreparedTransactionOffset (48 bytes, pre-packed)
 *     84 BODY length i32 | 88 BODY | TOPIC + PROPERTIES (the pre-encoded tail) | [__CRC32# 0x01 %010d 0x02]
 *
 * Both CRCs are zlib's CRC-32 & 0x7FFFFFFF (qs_crc32.h: PCLMULQDQ folding, 512 bits wide with AVX-512, where
 * the CPU has it): BODYCRC over the body, the __CRC32# property over every record byte before it.
 * pack_record(..., unit_buf, unit_position, tag_hash) also writes the record's consume queue unit (>qiq:
 * offset, size, tag hash), so a put is one call; pack_records writes a whole put_batch, pack_units its units.
 *
 * Every argument is checked, and the records must fit in the buffer, before the first byte is written: an
 * error leaves the buffers as they were. Bodies are held as Py_buffers (so is the target: a mapping cannot be
 * closed under us); from NOGIL_BYTES bytes on the writing runs with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "qs_crc32.h"

#define BODY_POSITION 88
#define CRC32_RESERVED_LEN 20
#define UNIT_SIZE 20
#define MAX_INT 0x7FFFFFFFLL
/* Writes of this many bytes or more (one call) run with the GIL released: 64 KiB is ~10-30 us of copying,
 * CRCs and page faults, much more than a release and re-take of the GIL; smaller writes keep it, so the
 * event loop is not made to wait for a thread that took the GIL meanwhile. */
#define NOGIL_BYTES (64 * 1024)
/* Py_buffers of a batch held on the stack; more are allocated. */
#define STACK_BODIES 64

static PyObject *InvalidMessageError;

static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put_be64(uint8_t *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* The constant parts of the records of one call. */
typedef struct {
    uint32_t magic;
    const uint8_t *queue_flag; /* 8 bytes */
    const uint8_t *middle;     /* 48 bytes */
    const uint8_t *tail;
    size_t tail_len;
    int prop_crc;
} rec_consts;

/* Write one record at dst (room checked by the caller); returns its size. Same steps, in the same order, as
 * the twin: BODYCRC from the body, the 88-byte header, the body, the tail, the __CRC32# property over
 * dst[0:end] (memmove: a body may even be a view of the destination). GIL-free. */
static size_t write_record(uint8_t *dst, int64_t physical_offset, int64_t queue_offset, const rec_consts *k,
                           const uint8_t *body, size_t n) {
    size_t end = BODY_POSITION + n + k->tail_len;
    size_t total = end + (k->prop_crc ? CRC32_RESERVED_LEN : 0);
    uint32_t body_crc = qs_crc32(0, body, n) & 0x7FFFFFFFu;
    put_be32(dst, (uint32_t)total);
    put_be32(dst + 4, k->magic);
    put_be32(dst + 8, body_crc);
    memcpy(dst + 12, k->queue_flag, 8);
    put_be64(dst + 20, (uint64_t)queue_offset);
    put_be64(dst + 28, (uint64_t)physical_offset);
    memcpy(dst + 36, k->middle, 48);
    put_be32(dst + 84, (uint32_t)n);
    memmove(dst + BODY_POSITION, body, n);
    memmove(dst + BODY_POSITION + n, k->tail, k->tail_len);
    if (k->prop_crc) {
        uint32_t crc = qs_crc32(0, dst, end) & 0x7FFFFFFFu;
        uint8_t *p = dst + end;
        memcpy(p, "__CRC32#\x01", 9);
        for (int i = 18; i >= 9; i--) {
            p[i] = (uint8_t)('0' + crc % 10);
            crc /= 10;
        }
        p[19] = 2;
    }
    return total;
}

/* An int argument (int or a subclass: no Python code runs) as a long long; `overflow` set past 64 bits. */
static int int_arg(PyObject *value, const char *name, long long *out, int *overflow) {
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, Py_TYPE(value)->tp_name);
        return -1;
    }
    *out = PyLong_AsLongLongAndOverflow(value, overflow);
    if (*out == -1 && PyErr_Occurred()) return -1;
    return 0;
}

/* position: 0 <= position, else ValueError (the record would not fit). */
static int position_arg(PyObject *value, long long *out) {
    int overflow;
    if (int_arg(value, "position", out, &overflow) < 0) return -1;
    if (overflow || *out < 0) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        return -1;
    }
    return 0;
}

/* A signed 64-bit field: InvalidMessageError outside. */
static int i64_arg(PyObject *value, const char *name, long long *out) {
    int overflow;
    if (int_arg(value, name, out, &overflow) < 0) return -1;
    if (overflow) {
        PyErr_Format(InvalidMessageError, "record field out of range: %s", name);
        return -1;
    }
    return 0;
}

static int magic_arg(PyObject *value, uint32_t *out) {
    long long v;
    int overflow;
    if (int_arg(value, "magic", &v, &overflow) < 0) return -1;
    if (overflow || v < 0 || v > 0xFFFFFFFFLL) {
        PyErr_SetString(InvalidMessageError, "record field out of range: magic");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* queue_flag (8), middle (48), tail (any length): exactly bytes. len < 0: any length. */
static int bytes_arg(PyObject *value, const char *name, Py_ssize_t len, const uint8_t **data, size_t *size) {
    if (!PyBytes_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, not %.100s", name, Py_TYPE(value)->tp_name);
        return -1;
    }
    if (len >= 0 && PyBytes_GET_SIZE(value) != len) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd bytes, got %zd", name, len, PyBytes_GET_SIZE(value));
        return -1;
    }
    *data = (const uint8_t *)PyBytes_AS_STRING(value);
    *size = (size_t)PyBytes_GET_SIZE(value);
    return 0;
}

/* The write target: a writable C-contiguous buffer (TypeError, BufferError). */
static int target_arg(PyObject *value, Py_buffer *view) {
    return PyObject_GetBuffer(value, view, PyBUF_WRITABLE);
}

/* A body: a C-contiguous buffer of any item type, taken as its bytes (TypeError, BufferError). */
static int body_arg(PyObject *value, Py_buffer *view) { return PyObject_GetBuffer(value, view, PyBUF_SIMPLE); }

/* The record size for a body of n bytes; InvalidMessageError past MAX_INT. */
static int record_size(size_t n, const rec_consts *k, size_t *total) {
    size_t reserved = k->prop_crc ? CRC32_RESERVED_LEN : 0;
    if (n > (size_t)MAX_INT || k->tail_len > (size_t)MAX_INT ||
        BODY_POSITION + n + k->tail_len + reserved > (size_t)MAX_INT) {
        PyErr_SetString(InvalidMessageError, "record field out of range: record longer than 2147483647 bytes");
        return -1;
    }
    *total = BODY_POSITION + n + k->tail_len + reserved;
    return 0;
}

/* A consume queue unit: the commit log offset, size and tag hash, big-endian (>qiq). GIL-free. */
static inline void write_unit(uint8_t *dst, long long offset, long long size, long long tag_hash) {
    put_be64(dst, (uint64_t)offset);
    put_be32(dst + 8, (uint32_t)size);
    put_be64(dst + 12, (uint64_t)tag_hash);
}

/* tag_hash: an int within i64, else ValueError (as pack_units). */
static int tag_hash_arg(PyObject *value, long long *out) {
    int overflow;
    if (int_arg(value, "tag_hash", out, &overflow) < 0) return -1;
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "consume queue unit field out of range: tag_hash");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(pack_record_doc,
             "pack_record(buf, position, physical_offset, magic, queue_flag, queue_offset, middle, body, tail,\n"
             "            append_prop_crc, unit_buf=None, unit_position=0, tag_hash=0, /)\n--\n\n"
             "Write one commit log record at buf[position:] (and, with unit_buf, its consume queue unit at\n"
             "unit_buf[unit_position:]) and return the position just past the record (see the twin\n"
             "_record_py.pack_record for the arguments and errors).");

static PyObject *pack_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 10 || nargs > 13) {
        PyErr_Format(PyExc_TypeError, "pack_record() takes from 10 to 13 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer target, body, unit;
    rec_consts k;
    long long position, physical_offset, queue_offset, unit_position = 0, tag_hash = 0;
    size_t flag_len, middle_len, total;
    if (target_arg(args[0], &target) < 0) return NULL;
    body.obj = NULL;
    unit.obj = NULL;
    PyObject *result = NULL;
    if (position_arg(args[1], &position) < 0 || i64_arg(args[2], "physical_offset", &physical_offset) < 0 ||
        magic_arg(args[3], &k.magic) < 0 || bytes_arg(args[4], "queue_flag", 8, &k.queue_flag, &flag_len) < 0 ||
        i64_arg(args[5], "queue_offset", &queue_offset) < 0 ||
        bytes_arg(args[6], "middle", 48, &k.middle, &middle_len) < 0 || body_arg(args[7], &body) < 0 ||
        bytes_arg(args[8], "tail", -1, &k.tail, &k.tail_len) < 0)
        goto done;
    int prop_crc = PyObject_IsTrue(args[9]);
    if (prop_crc < 0) goto done;
    k.prop_crc = prop_crc;
    if (record_size((size_t)body.len, &k, &total) < 0) goto done;
    if ((unsigned long long)position > (unsigned long long)target.len ||
        total > (size_t)(target.len - (Py_ssize_t)position)) {
        PyErr_SetString(PyExc_ValueError, "the record does not fit in the buffer");
        goto done;
    }
    if (nargs > 10 && args[10] != Py_None) {
        if (target_arg(args[10], &unit) < 0) goto done;
        if ((nargs > 11 && position_arg(args[11], &unit_position) < 0) ||
            (nargs > 12 && tag_hash_arg(args[12], &tag_hash) < 0))
            goto done;
        if ((unsigned long long)unit_position > (unsigned long long)unit.len ||
            UNIT_SIZE > unit.len - (Py_ssize_t)unit_position) {
            PyErr_SetString(PyExc_ValueError, "the unit does not fit in the buffer");
            goto done;
        }
    }
    uint8_t *dst = (uint8_t *)target.buf + position;
    if (total >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        write_record(dst, physical_offset, queue_offset, &k, (const uint8_t *)body.buf, (size_t)body.len);
        Py_END_ALLOW_THREADS
    } else {
        write_record(dst, physical_offset, queue_offset, &k, (const uint8_t *)body.buf, (size_t)body.len);
    }
    if (unit.obj != NULL) write_unit((uint8_t *)unit.buf + unit_position, physical_offset, (long long)total, tag_hash);
    result = PyLong_FromLongLong(position + (long long)total);
done:
    if (unit.obj != NULL) PyBuffer_Release(&unit);
    if (body.obj != NULL) PyBuffer_Release(&body);
    PyBuffer_Release(&target);
    return result;
}

PyDoc_STRVAR(pack_records_doc,
             "pack_records(buf, position, base_offset, magic, queue_flag, queue_offset, middle, bodies, tail,\n"
             "             append_prop_crc, /)\n--\n\n"
             "Write one record per body from buf[position:] on; return (end position, tuple of the records'\n"
             "commit log offsets). See the twin _record_py.pack_records for the arguments and errors.");

static PyObject *pack_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "pack_records() takes exactly 10 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer target;
    Py_buffer stack_views[STACK_BODIES];
    Py_buffer *views = stack_views;
    Py_ssize_t held = 0;
    rec_consts k;
    long long position, base_offset, queue_offset;
    size_t flag_len, middle_len;
    PyObject *result = NULL, *offsets = NULL;
    if (target_arg(args[0], &target) < 0) return NULL;
    PyObject *bodies = args[7];
    if (position_arg(args[1], &position) < 0 || i64_arg(args[2], "base_offset", &base_offset) < 0 ||
        magic_arg(args[3], &k.magic) < 0 || bytes_arg(args[4], "queue_flag", 8, &k.queue_flag, &flag_len) < 0 ||
        i64_arg(args[5], "queue_offset", &queue_offset) < 0 ||
        bytes_arg(args[6], "middle", 48, &k.middle, &middle_len) < 0)
        goto done;
    if (!PyList_Check(bodies) && !PyTuple_Check(bodies)) {
        PyErr_Format(PyExc_TypeError, "bodies must be a list or a tuple, not %.100s", Py_TYPE(bodies)->tp_name);
        goto done;
    }
    if (bytes_arg(args[8], "tail", -1, &k.tail, &k.tail_len) < 0) goto done;
    int prop_crc = PyObject_IsTrue(args[9]);
    if (prop_crc < 0) goto done;
    k.prop_crc = prop_crc;
    /* No Python code runs from here on while the GIL is held: the list cannot change under us. */
    Py_ssize_t count = PySequence_Fast_GET_SIZE(bodies);
    PyObject **items = PySequence_Fast_ITEMS(bodies);
    size_t room = (unsigned long long)position > (unsigned long long)target.len
                      ? 0
                      : (size_t)(target.len - (Py_ssize_t)position);
    /* Every record takes more than BODY_POSITION bytes: a batch that cannot fit holds no body (its errors
     * are still found in the same order) and allocates nothing. */
    int may_fit = (unsigned long long)position <= (unsigned long long)target.len &&
                  (size_t)count <= room / BODY_POSITION;
    if (may_fit && count > STACK_BODIES) {
        views = PyMem_Malloc((size_t)count * sizeof(Py_buffer));
        if (views == NULL) {
            views = stack_views;
            PyErr_NoMemory();
            goto done;
        }
    }
    size_t needed = 0; /* stops growing once past room: cannot overflow */
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_buffer view;
        size_t total;
        if (body_arg(items[i], &view) < 0) goto done;
        if (may_fit) {
            views[held++] = view;
        } else {
            PyBuffer_Release(&view);
        }
        if (record_size((size_t)view.len, &k, &total) < 0) goto done;
        if (needed <= room) needed += total;
    }
    if (count > 0 && queue_offset > LLONG_MAX - (long long)(count - 1)) {
        PyErr_SetString(InvalidMessageError, "record field out of range: queue_offset");
        goto done;
    }
    if (!may_fit || needed > room) {
        PyErr_SetString(PyExc_ValueError, "the records do not fit in the buffer");
        goto done;
    }
    /* position + needed <= len(buf) < 2**63: the last record's offset is base_offset + position + needed
     * minus its size; every offset lies in [base_offset + position, base_offset + position + needed]. */
    long long first = 0, last = 0;
    if (__builtin_add_overflow(base_offset, position, &first) ||
        __builtin_add_overflow(first, (long long)needed, &last)) {
        PyErr_SetString(InvalidMessageError, "record field out of range: physical_offset");
        goto done;
    }
    offsets = PyTuple_New(count);
    if (offsets == NULL) goto done;
    size_t fixed = BODY_POSITION + k.tail_len + (k.prop_crc ? CRC32_RESERVED_LEN : 0);
    long long at = position;
    for (Py_ssize_t i = 0; i < count; i++) { /* the offsets first: no Python object is made without the GIL */
        PyObject *offset = PyLong_FromLongLong(base_offset + at);
        if (offset == NULL) goto done;
        PyTuple_SET_ITEM(offsets, i, offset);
        at += (long long)(fixed + (size_t)views[i].len);
    }
    uint8_t *base = (uint8_t *)target.buf;
    at = position;
    if (needed >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < count; i++) {
            at += (long long)write_record(base + at, base_offset + at, queue_offset + i, &k,
                                          (const uint8_t *)views[i].buf, (size_t)views[i].len);
        }
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t i = 0; i < count; i++) {
            at += (long long)write_record(base + at, base_offset + at, queue_offset + i, &k,
                                          (const uint8_t *)views[i].buf, (size_t)views[i].len);
        }
    }
    result = PyTuple_New(2);
    if (result != NULL) {
        PyObject *end = PyLong_FromLongLong(at);
        if (end == NULL) {
            Py_CLEAR(result);
        } else {
            PyTuple_SET_ITEM(result, 0, end);
            PyTuple_SET_ITEM(result, 1, offsets);
            offsets = NULL;
        }
    }
done:
    Py_XDECREF(offsets);
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    if (views != stack_views) PyMem_Free(views);
    PyBuffer_Release(&target);
    return result;
}

PyDoc_STRVAR(pack_units_doc,
             "pack_units(buf, position, offsets, start, stop, end_offset, tag_hash, /)\n--\n\n"
             "Write the consume queue units of records offsets[start:stop] from buf[position:] on; return the\n"
             "position past the last. See the twin _record_py.pack_units for the arguments and errors.");

/* The commit log offset of offsets[i] (an int in i64: TypeError, ValueError). */
static int unit_offset(PyObject *item, long long *out) {
    int overflow;
    if (int_arg(item, "a commit log offset", out, &overflow) < 0) return -1;
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "consume queue unit field out of range: commit log offset");
        return -1;
    }
    return 0;
}

static PyObject *pack_units(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "pack_units() takes exactly 7 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer target;
    long long position, start, stop, end_offset, tag_hash, offset, next;
    int overflow;
    PyObject *result = NULL;
    if (target_arg(args[0], &target) < 0) return NULL;
    PyObject *offsets = args[2];
    if (position_arg(args[1], &position) < 0) goto done;
    if (!PyList_Check(offsets) && !PyTuple_Check(offsets)) {
        PyErr_Format(PyExc_TypeError, "offsets must be a list or a tuple, not %.100s", Py_TYPE(offsets)->tp_name);
        goto done;
    }
    if (int_arg(args[3], "start", &start, &overflow) < 0) goto done;
    if (overflow) start = -1;
    if (int_arg(args[4], "stop", &stop, &overflow) < 0) goto done;
    if (overflow) stop = -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(offsets);
    if (start < 0 || stop < start || stop > (long long)count) {
        PyErr_SetString(PyExc_ValueError, "need 0 <= start <= stop <= len(offsets)");
        goto done;
    }
    if (int_arg(args[5], "end_offset", &end_offset, &overflow) < 0) goto done;
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "consume queue unit field out of range: end_offset");
        goto done;
    }
    if (tag_hash_arg(args[6], &tag_hash) < 0) goto done;
    if ((unsigned long long)position > (unsigned long long)target.len ||
        (stop - start) > (target.len - (Py_ssize_t)position) / UNIT_SIZE) {
        PyErr_SetString(PyExc_ValueError, "the units do not fit in the buffer");
        goto done;
    }
    /* Two passes over the items (ints: no Python code runs in between): check every size, then write. */
    PyObject **items = PySequence_Fast_ITEMS(offsets);
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *dst = (uint8_t *)target.buf + position;
        if (start < stop && unit_offset(items[start], &offset) < 0) goto done;
        for (long long i = start; i < stop; i++) {
            if (i + 1 < (long long)count) {
                if (unit_offset(items[i + 1], &next) < 0) goto done;
            } else {
                next = end_offset;
            }
            long long size;
            if (__builtin_sub_overflow(next, offset, &size) || size < -MAX_INT - 1 || size > MAX_INT) {
                PyErr_SetString(PyExc_ValueError, "consume queue unit field out of range: size");
                goto done;
            }
            if (pass == 1) {
                write_unit(dst, offset, size, tag_hash);
                dst += UNIT_SIZE;
            }
            offset = next;
        }
    }
    result = PyLong_FromLongLong(position + (stop - start) * UNIT_SIZE);
done:
    PyBuffer_Release(&target);
    return result;
}

PyDoc_STRVAR(crc32_doc,
             "crc32(data, value=0, /)\n--\n\n"
             "zlib.crc32(data, value): the CRC-32 of a bytes-like object (C-contiguous), continuing from\n"
             "`value` (the CRC of the bytes before). Runs without the GIL past 64 KiB.");

static PyObject *crc32(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc32() takes 1 or 2 positional arguments (%zd given)", nargs);
        return NULL;
    }
    uint32_t value = 0;
    if (nargs == 2) {
        if (!PyLong_Check(args[1])) {
            PyErr_Format(PyExc_TypeError, "value must be an int, not %.100s", Py_TYPE(args[1])->tp_name);
            return NULL;
        }
        value = (uint32_t)PyLong_AsUnsignedLongMask(args[1]);
        if (PyErr_Occurred()) return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) return NULL;
    if (data.len >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        value = qs_crc32(value, (const uint8_t *)data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        value = qs_crc32(value, (const uint8_t *)data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(value);
}

PyDoc_STRVAR(crc32_paths_doc,
             "_crc32_paths(limit=-1, /)\n--\n\n"
             "Tests only: the CRC-32 implementations in use as (pclmul, avx512) flags; with limit 0 (tables\n"
             "only), 1 (up to PCLMULQDQ) or 2 (all the CPU has), first restrict them to that level. The twin\n"
             "has the same function and always answers (False, False).");

static PyObject *crc32_paths(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    static int have_clmul = -1, have_avx512 = -1;
    if (have_clmul < 0) {
        have_clmul = qs_crc32_clmul;
        have_avx512 = qs_crc32_avx512;
    }
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "_crc32_paths() takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1) {
        long limit = PyLong_AsLong(args[0]);
        if (limit == -1 && PyErr_Occurred()) return NULL;
        if (limit >= 0) {
            qs_crc32_clmul = have_clmul && limit >= 1;
            qs_crc32_avx512 = have_avx512 && limit >= 2;
        }
    }
    return Py_BuildValue("(OO)", qs_crc32_clmul ? Py_True : Py_False, qs_crc32_avx512 ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"pack_record", (PyCFunction)(void (*)(void))pack_record, METH_FASTCALL, pack_record_doc},
    {"pack_records", (PyCFunction)(void (*)(void))pack_records, METH_FASTCALL, pack_records_doc},
    {"pack_units", (PyCFunction)(void (*)(void))pack_units, METH_FASTCALL, pack_units_doc},
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL, crc32_doc},
    {"_crc32_paths", (PyCFunction)(void (*)(void))crc32_paths, METH_FASTCALL, crc32_paths_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
             "The commit log record encoder and the consume queue unit writer, compiled (twin: _record_py).\n\n"
             "pack_record / pack_records write RocketMQ commit log records straight into a mapped segment,\n"
             "pack_units writes consume queue units, crc32 is zlib's. Use quasar.storage.record.\n"
             "Source: src/quasar/storage/_record_c.c.");

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "quasar.storage._record_c", module_doc, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_c(void) {
    PyObject *errors = PyImport_ImportModule("quasar.storage.errors");
    if (errors == NULL) return NULL;
    Py_XSETREF(InvalidMessageError, PyObject_GetAttrString(errors, "InvalidMessageError"));
    Py_DECREF(errors);
    if (InvalidMessageError == NULL) return NULL;
    qs_crc32_init();
    return PyModule_Create(&module_def);
}
