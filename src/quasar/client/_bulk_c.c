/* quasar.client._bulk_c: the bulk batch-entry encoder, compiled (DESIGN.md "Compiled hot paths").
 *
 * Twin of quasar/client/_bulk_py.py: same API, same bytes, same exception classes; its docstrings are the
 * specification. encode_entries(count, values, keys, properties, event_times, first_sequence_id, rows,
 * max_messages, max_bytes) -> [(payload, num_messages, first_row), ...] turns Arrow-layout column buffers
 * into uncompressed Pulsar batch payloads ([u32 size][SingleMessageMetadata][value] per row).
 *
 * Two passes over the rows, both with the GIL released: the first validates every row and sizes every
 * entry, the second writes into the bytes objects allocated (with the GIL) in between. Every read of a
 * buffer is bounds-checked, so no input can crash the interpreter; errors are reported for the first bad
 * row, as the twin does. The buffers must not change during the call (pyarrow buffers and bytes never do).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "qs_pb.h"
#include "qs_utf8.h"

/* ------------------------------------------------------------------------------------- columns -- */

typedef struct {
    int present;
    Py_ssize_t offset;
    const uint8_t *valid; /* NULL: no nulls */
    Py_ssize_t valid_len;
    const uint8_t *offs;
    Py_ssize_t offs_len;
    const uint8_t *data;
    Py_ssize_t data_len;
} varcol;

typedef struct {
    int present;
    Py_ssize_t offset;
    const uint8_t *valid;
    Py_ssize_t valid_len;
    const uint8_t *vals;
    Py_ssize_t vals_len;
} i64col;

typedef struct {
    int present;
    Py_ssize_t offset;
    const uint8_t *valid;
    Py_ssize_t valid_len;
    const uint8_t *offs;
    Py_ssize_t offs_len;
    varcol keys, items;
} mapcol;

#define MAX_VIEWS 16
typedef struct {
    Py_buffer views[MAX_VIEWS];
    int n;
} viewset;

static void views_release(viewset *vs) {
    for (int i = 0; i < vs->n; i++) PyBuffer_Release(&vs->views[i]);
    vs->n = 0;
}

static int get_view(viewset *vs, PyObject *obj, const char *name, const uint8_t **p, Py_ssize_t *len) {
    if (vs->n >= MAX_VIEWS) {
        PyErr_SetString(PyExc_ValueError, "too many buffers");
        return -1;
    }
    if (PyObject_GetBuffer(obj, &vs->views[vs->n], PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a bytes-like buffer, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    Py_buffer *v = &vs->views[vs->n++];
    *p = (const uint8_t *)v->buf;
    *len = v->len;
    return 0;
}

static int get_index(PyObject *obj, const char *name, Py_ssize_t *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is out of range", name);
        return -1;
    }
    *out = v;
    return 0;
}

static int get_offset(PyObject *obj, const char *name, Py_ssize_t *out) {
    if (get_index(obj, name, out)) return -1;
    if (*out < 0) {
        PyErr_Format(PyExc_ValueError, "malformed column '%s': negative offset", name);
        return -1;
    }
    return 0;
}

static int get_validity(viewset *vs, PyObject *obj, const char *name, Py_ssize_t offset, Py_ssize_t count,
                        const uint8_t **p, Py_ssize_t *len) {
    if (obj == Py_None) {
        *p = NULL;
        *len = 0;
        return 0;
    }
    if (get_view(vs, obj, name, p, len)) return -1;
    if (count > 0 && *len < (offset + count + 7) / 8) {
        PyErr_Format(PyExc_ValueError, "malformed column '%s': validity bitmap shorter than %zd bits", name,
                     offset + count);
        return -1;
    }
    return 0;
}

/* count >= 0: a column of count rows; count < 0: a map child (rows checked one by one). */
static int parse_var(viewset *vs, PyObject *spec, const char *name, Py_ssize_t count, varcol *c) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 4) {
        PyErr_Format(PyExc_TypeError, "column '%s' must be (offset, validity, offsets, data)", name);
        return -1;
    }
    c->present = 1;
    if (get_offset(PyTuple_GET_ITEM(spec, 0), name, &c->offset)) return -1;
    if (c->offset > PY_SSIZE_T_MAX / 16) {
        PyErr_Format(PyExc_ValueError, "malformed column '%s': offset too large", name);
        return -1;
    }
    if (get_validity(vs, PyTuple_GET_ITEM(spec, 1), name, c->offset, count < 0 ? 0 : count, &c->valid,
                     &c->valid_len))
        return -1;
    if (get_view(vs, PyTuple_GET_ITEM(spec, 2), name, &c->offs, &c->offs_len)) return -1;
    PyObject *data = PyTuple_GET_ITEM(spec, 3);
    if (data == Py_None) {
        c->data = (const uint8_t *)"";
        c->data_len = 0;
    } else if (get_view(vs, data, name, &c->data, &c->data_len)) {
        return -1;
    }
    Py_ssize_t rows = count < 0 ? 0 : count;
    if (c->offs_len / 4 < c->offset + rows + 1) {
        PyErr_Format(PyExc_ValueError, "malformed column '%s': offsets buffer shorter than %zd offsets", name,
                     rows + 1);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------- row access -- */

enum {
    E_OK = 0,
    E_VALUE_NULL,
    E_MALFORMED_VALUE,
    E_VALUE_BIG,
    E_MALFORMED_KEY,
    E_KEY_UTF8,
    E_MALFORMED_PROPS,
    E_MALFORMED_PKEYS,
    E_MALFORMED_PITEMS,
    E_PKEY_NULL,
    E_PVALUE_NULL,
    E_PKEY_UTF8,
    E_PVALUE_UTF8,
    E_MALFORMED_EVENT,
    E_EVENT_NEGATIVE,
    E_MALFORMED_ROWS,
    E_SEQUENCE,
    E_TOO_BIG,
};

static inline int bit(const uint8_t *bits, Py_ssize_t j) { return (bits[j >> 3] >> (j & 7)) & 1; }

static inline int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static inline int64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
    return (int64_t)v;
}

/* Row i of a binary column: 1 and (p, len); 0 when null; -1 malformed. */
static inline int var_get(const varcol *c, Py_ssize_t i, int child, const uint8_t **p, size_t *len) {
    Py_ssize_t j = c->offset + i;
    if (child) {
        if (j < 0 || j + 2 > c->offs_len / 4) return -1;
        if (c->valid != NULL && (j >> 3) >= c->valid_len) return -1;
    }
    if (c->valid != NULL && !bit(c->valid, j)) return 0;
    int32_t start = le32(c->offs + 4 * j), end = le32(c->offs + 4 * j + 4);
    if (start < 0 || start > end || end > c->data_len) return -1;
    *p = c->data + start;
    *len = (size_t)(end - start);
    return 1;
}

static inline size_t delimited_size(size_t len) { return 1 + qs_pb_varint_size(len) + len; }

static inline uint8_t *put_delimited(uint8_t *out, uint8_t tag, const uint8_t *p, size_t len) {
    *out++ = tag;
    out += qs_pb_put_varint(out, len);
    memcpy(out, p, len);
    return out + len;
}

typedef struct {
    Py_ssize_t count;
    varcol values, keys;
    mapcol props;
    i64col events;
    uint64_t first;
    const uint8_t *rows;
    Py_ssize_t rows_len;
    Py_ssize_t max_messages, max_bytes;
} job;

/* Size (out == NULL) or write one item of row i; *size is its whole size, *value_len its value's.
 * Returns E_OK or an error code. */
static int item(const job *jb, Py_ssize_t i, uint8_t *out, size_t *size, size_t *value_len) {
    const uint8_t *value;
    size_t vlen;
    int got = var_get(&jb->values, i, 0, &value, &vlen);
    if (got == 0) return E_VALUE_NULL;
    if (got < 0) return E_MALFORMED_VALUE;
    if (vlen > INT32_MAX) return E_VALUE_BIG;
    size_t smm = 0;
    uint8_t *w = out == NULL ? NULL : out + 4;
    /* 1: properties */
    const mapcol *m = &jb->props;
    if (m->present) {
        Py_ssize_t j = m->offset + i;
        if (m->valid == NULL || bit(m->valid, j)) {
            int32_t start = le32(m->offs + 4 * j), end = le32(m->offs + 4 * j + 4);
            if (start < 0 || start > end) return E_MALFORMED_PROPS;
            for (int32_t e = start; e < end; e++) {
                const uint8_t *kp, *vp;
                size_t kl, vl;
                int gk = var_get(&m->keys, e, 1, &kp, &kl);
                if (gk < 0) return E_MALFORMED_PKEYS;
                if (gk == 0) return E_PKEY_NULL;
                int gv = var_get(&m->items, e, 1, &vp, &vl);
                if (gv < 0) return E_MALFORMED_PITEMS;
                if (gv == 0) return E_PVALUE_NULL;
                if (out == NULL) {
                    if (!qs_utf8_valid(kp, kl)) return E_PKEY_UTF8;
                    if (!qs_utf8_valid(vp, vl)) return E_PVALUE_UTF8;
                }
                size_t kv = delimited_size(kl) + delimited_size(vl);
                smm += 1 + qs_pb_varint_size(kv) + kv;
                if (w != NULL) {
                    *w++ = 0x0A;
                    w += qs_pb_put_varint(w, kv);
                    w = put_delimited(w, 0x0A, kp, kl);
                    w = put_delimited(w, 0x12, vp, vl);
                }
            }
        }
    }
    /* 2: partition_key */
    if (jb->keys.present) {
        const uint8_t *kp;
        size_t kl;
        int gk = var_get(&jb->keys, i, 0, &kp, &kl);
        if (gk < 0) return E_MALFORMED_KEY;
        if (gk > 0) {
            if (out == NULL && !qs_utf8_valid(kp, kl)) return E_KEY_UTF8;
            smm += delimited_size(kl);
            if (w != NULL) w = put_delimited(w, 0x12, kp, kl);
        }
    }
    /* 3: payload_size */
    smm += 1 + qs_pb_varint_size(vlen);
    if (w != NULL) {
        *w++ = 0x18;
        w += qs_pb_put_varint(w, vlen);
    }
    /* 5: event_time */
    const i64col *ev = &jb->events;
    if (ev->present) {
        Py_ssize_t j = ev->offset + i;
        if (ev->valid == NULL || bit(ev->valid, j)) {
            int64_t t = le64(ev->vals + 8 * j);
            if (t < 0) return E_EVENT_NEGATIVE;
            smm += 1 + qs_pb_varint_size((uint64_t)t);
            if (w != NULL) {
                *w++ = 0x28;
                w += qs_pb_put_varint(w, (uint64_t)t);
            }
        }
    }
    /* 8: sequence_id */
    uint64_t r = (uint64_t)i;
    if (jb->rows != NULL) {
        int64_t rr = le64(jb->rows + 8 * i);
        if (rr < 0) return E_SEQUENCE;
        r = (uint64_t)rr;
    }
    uint64_t sid = jb->first + r;
    if (sid < jb->first) return E_SEQUENCE; /* past 2**64 */
    smm += 1 + qs_pb_varint_size(sid);
    if (w != NULL) {
        *w++ = 0x40;
        w += qs_pb_put_varint(w, sid);
        qs_put_be32(out, (uint32_t)smm);
        memcpy(w, value, vlen);
    }
    if (smm > UINT32_MAX) return E_TOO_BIG;
    *size = 4 + smm + vlen;
    *value_len = vlen;
    return E_OK;
}

static void raise_code(int code, Py_ssize_t row) {
    switch (code) {
    case E_VALUE_NULL: PyErr_Format(PyExc_ValueError, "value is null in row %zd", row); break;
    case E_VALUE_BIG: PyErr_Format(PyExc_ValueError, "value of row %zd is too large", row); break;
    case E_MALFORMED_VALUE:
        PyErr_SetString(PyExc_ValueError, "malformed column 'value': offsets out of order or past the data");
        break;
    case E_MALFORMED_KEY:
        PyErr_SetString(PyExc_ValueError, "malformed column 'key': offsets out of order or past the data");
        break;
    case E_KEY_UTF8: PyErr_Format(PyExc_ValueError, "key is not UTF-8 in row %zd", row); break;
    case E_MALFORMED_PROPS:
        PyErr_SetString(PyExc_ValueError, "malformed column 'properties': offsets out of order");
        break;
    case E_MALFORMED_PKEYS:
        PyErr_Format(PyExc_ValueError, "malformed column 'properties keys' in row %zd", row);
        break;
    case E_MALFORMED_PITEMS:
        PyErr_Format(PyExc_ValueError, "malformed column 'properties values' in row %zd", row);
        break;
    case E_PKEY_NULL: PyErr_Format(PyExc_ValueError, "property key is null in row %zd", row); break;
    case E_PVALUE_NULL: PyErr_Format(PyExc_ValueError, "property value is null in row %zd", row); break;
    case E_PKEY_UTF8: PyErr_Format(PyExc_ValueError, "property key is not UTF-8 in row %zd", row); break;
    case E_PVALUE_UTF8: PyErr_Format(PyExc_ValueError, "property value is not UTF-8 in row %zd", row); break;
    case E_EVENT_NEGATIVE: PyErr_Format(PyExc_ValueError, "eventTime is negative in row %zd", row); break;
    case E_SEQUENCE:
        PyErr_Format(PyExc_ValueError, "sequence id of row %zd is out of range [0, 2**64)", row);
        break;
    default: PyErr_Format(PyExc_ValueError, "entry of row %zd is too large", row); break;
    }
}

/* ------------------------------------------------------------------------------ encode_entries -- */

typedef struct {
    Py_ssize_t first_row, num;
    size_t bytes;
    uint8_t *out;
} entry;

PyDoc_STRVAR(encode_entries_doc,
"encode_entries(count, values, keys, properties, event_times, first_sequence_id, rows, max_messages,\n"
"max_bytes) -> list[tuple[bytes, int, int]]\n\n"
"Rows in Arrow-layout column buffers -> uncompressed Pulsar batch payloads (payload, num_messages,\n"
"first_row); see quasar/client/_bulk_py.py. Runs without the GIL. Raises TypeError / ValueError.");

static PyObject *encode_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "encode_entries takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    job jb;
    memset(&jb, 0, sizeof jb);
    viewset vs;
    vs.n = 0;
    PyObject *result = NULL;
    entry *entries = NULL;
    if (get_index(args[0], "count", &jb.count)) return NULL;
    if (!PyLong_Check(args[5]) || PyBool_Check(args[5])) {
        PyErr_Format(PyExc_TypeError, "first_sequence_id must be an int, got %.100s", Py_TYPE(args[5])->tp_name);
        return NULL;
    }
    if (get_index(args[7], "max_messages", &jb.max_messages) || get_index(args[8], "max_bytes", &jb.max_bytes))
        return NULL;
    if (jb.count < 0 || jb.max_messages < 1 || jb.max_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0 and max_messages, max_bytes >= 1");
        return NULL;
    }
    if (jb.count > PY_SSIZE_T_MAX / 16) {
        PyErr_SetString(PyExc_ValueError, "count is out of range");
        return NULL;
    }
    {
        int overflow = 0;
        unsigned long long first = PyLong_AsUnsignedLongLong(args[5]);
        if (first == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            overflow = 1;
        }
        if (overflow) {
            PyErr_SetString(PyExc_ValueError, "first_sequence_id is out of range [0, 2**64)");
            return NULL;
        }
        jb.first = (uint64_t)first;
    }
    if (parse_var(&vs, args[1], "value", jb.count, &jb.values)) goto done;
    if (args[2] != Py_None && parse_var(&vs, args[2], "key", jb.count, &jb.keys)) goto done;
    if (args[4] != Py_None) {
        PyObject *spec = args[4];
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
            PyErr_SetString(PyExc_TypeError, "column 'eventTime' must be (offset, validity, values)");
            goto done;
        }
        i64col *ev = &jb.events;
        ev->present = 1;
        if (get_offset(PyTuple_GET_ITEM(spec, 0), "eventTime", &ev->offset)) goto done;
        if (ev->offset > PY_SSIZE_T_MAX / 16) {
            PyErr_SetString(PyExc_ValueError, "malformed column 'eventTime': offset too large");
            goto done;
        }
        if (get_validity(&vs, PyTuple_GET_ITEM(spec, 1), "eventTime", ev->offset, jb.count, &ev->valid,
                         &ev->valid_len))
            goto done;
        if (get_view(&vs, PyTuple_GET_ITEM(spec, 2), "eventTime", &ev->vals, &ev->vals_len)) goto done;
        if (ev->vals_len / 8 < ev->offset + jb.count) {
            PyErr_SetString(PyExc_ValueError, "malformed column 'eventTime': values buffer too short");
            goto done;
        }
    }
    if (args[3] != Py_None) {
        PyObject *spec = args[3];
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5) {
            PyErr_SetString(PyExc_TypeError, "column 'properties' must be (offset, validity, offsets, keys, items)");
            goto done;
        }
        mapcol *m = &jb.props;
        m->present = 1;
        if (get_offset(PyTuple_GET_ITEM(spec, 0), "properties", &m->offset)) goto done;
        if (m->offset > PY_SSIZE_T_MAX / 16) {
            PyErr_SetString(PyExc_ValueError, "malformed column 'properties': offset too large");
            goto done;
        }
        if (get_validity(&vs, PyTuple_GET_ITEM(spec, 1), "properties", m->offset, jb.count, &m->valid,
                         &m->valid_len))
            goto done;
        if (get_view(&vs, PyTuple_GET_ITEM(spec, 2), "properties offsets", &m->offs, &m->offs_len)) goto done;
        if (m->offs_len / 4 < m->offset + jb.count + 1) {
            PyErr_SetString(PyExc_ValueError,
                            "malformed column 'properties': offsets buffer shorter than count + 1 offsets");
            goto done;
        }
        if (parse_var(&vs, PyTuple_GET_ITEM(spec, 3), "properties keys", -1, &m->keys)) goto done;
        if (parse_var(&vs, PyTuple_GET_ITEM(spec, 4), "properties values", -1, &m->items)) goto done;
    }
    if (args[6] != Py_None) {
        if (get_view(&vs, args[6], "rows", &jb.rows, &jb.rows_len)) goto done;
        if (jb.rows_len / 8 < jb.count) {
            PyErr_SetString(PyExc_ValueError, "rows buffer shorter than count int64 values");
            goto done;
        }
    }

    entries = PyMem_Malloc(sizeof(entry) * (size_t)(jb.count > 0 ? jb.count : 1));
    if (entries == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* pass 1: validate and size */
    Py_ssize_t n_entries = 0, bad_row = -1;
    int code = E_OK;
    Py_BEGIN_ALLOW_THREADS
    entry *cur = NULL;
    size_t value_bytes = 0;
    for (Py_ssize_t i = 0; i < jb.count; i++) {
        size_t size, vlen;
        code = item(&jb, i, NULL, &size, &vlen);
        if (code != E_OK) {
            bad_row = i;
            break;
        }
        if (cur == NULL || cur->num >= jb.max_messages || value_bytes + vlen > (size_t)jb.max_bytes) {
            cur = &entries[n_entries++];
            cur->first_row = i;
            cur->num = 0;
            cur->bytes = 0;
            value_bytes = 0;
        }
        if (cur->bytes > (size_t)PY_SSIZE_T_MAX - size) {
            code = E_TOO_BIG;
            bad_row = i;
            break;
        }
        cur->num++;
        cur->bytes += size;
        value_bytes += vlen;
    }
    Py_END_ALLOW_THREADS
    if (code != E_OK) {
        raise_code(code, bad_row);
        goto done;
    }
    result = PyList_New(n_entries);
    if (result == NULL) goto done;
    for (Py_ssize_t k = 0; k < n_entries; k++) {
        PyObject *payload = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)entries[k].bytes);
        if (payload == NULL) goto fail;
        entries[k].out = (uint8_t *)PyBytes_AS_STRING(payload);
        PyObject *tuple = Py_BuildValue("(Nnn)", payload, entries[k].num, entries[k].first_row);
        if (tuple == NULL) goto fail;
        PyList_SET_ITEM(result, k, tuple);
    }
    /* pass 2: write (the rows were validated; the bytes objects are not visible to anyone yet) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n_entries; k++) {
        uint8_t *w = entries[k].out;
        Py_ssize_t end = entries[k].first_row + entries[k].num;
        for (Py_ssize_t i = entries[k].first_row; i < end; i++) {
            size_t size, vlen;
            item(&jb, i, w, &size, &vlen);
            w += size;
        }
    }
    Py_END_ALLOW_THREADS
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_Free(entries);
    views_release(&vs);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_entries", (PyCFunction)(void (*)(void))encode_entries, METH_FASTCALL, encode_entries_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "quasar.client._bulk_c",
    "Bulk batch-entry encoder (twin: quasar.client._bulk_py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bulk_c(void) { return PyModule_Create(&module_def); }
