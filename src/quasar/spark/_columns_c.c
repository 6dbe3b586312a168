/* quasar.spark._columns_c: stored entries -> column buffers of the Spark read schema, compiled (DESIGN.md
 * "Compiled hot paths").
 *
 *   decode_entries(entries, partition, start, end) -> (rows, buffers, bad)
 *
 * Twin of quasar/spark/_columns_py.py: same API, same bytes, same exception classes; its docstring is the
 * specification. The entries' bytes objects are pinned (a reference each) while the GIL is released for the
 * whole decode; every read is bounds-checked (qs_pb.h), keys and properties are checked as strict UTF-8
 * (qs_utf8.h); a malformed entry adds no row (the buffers are rolled back to where it started) and is reported.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qs_pb.h"
#include "qs_pyargs.h"
#include "qs_utf8.h"

#define ENTRY_END (1LL << 31)
#define NBUF 19

/* buffer indexes, in the order of BUFFERS in _columns_py.py */
enum {
    B_KEY_VALID, B_KEY_OFF, B_KEY, B_VALUE_OFF, B_VALUE, B_ID_OFF, B_ID, B_LEDGER, B_ENTRY, B_BATCH, B_PUBLISH,
    B_EVENT_VALID, B_EVENT, B_PROPS_OFF, B_PK_OFF, B_PK, B_PV_OFF, B_PV, B_REDELIVERY
};

typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static int buf_put(buf_t *b, const void *data, size_t n) {
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) return -1;
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static int put_i32(buf_t *b, int32_t v) { return buf_put(b, &v, 4); } /* little-endian hosts (x86, arm) */
static int put_i64(buf_t *b, int64_t v) { return buf_put(b, &v, 8); }

typedef struct {
    const uint8_t *k, *v;
    size_t klen, vlen;
} kv_t;

typedef struct {
    kv_t *items;
    size_t n, cap;
} kvs_t;

static int kvs_add(kvs_t *s, kv_t kv) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        kv_t *items = realloc(s->items, cap * sizeof(kv_t));
        if (!items) return -1;
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = kv;
    return 0;
}

/* What a (Single)MessageMetadata holds for a row. */
typedef struct {
    const uint8_t *key;
    size_t key_len;
    int has_key, has_size, has_batch;
    uint64_t event, size, publish, batch;
} meta_t;

#define BAD(reason) \
    do {            \
        *why = reason; \
        return -1;  \
    } while (0)

/* Parse a KeyValue at [p, end) into *kv (missing key/value: empty). */
static int parse_kv(const uint8_t *p, const uint8_t *end, kv_t *kv, const char **why) {
    qs_pb_cursor c = {p, end};
    kv->k = kv->v = p;
    kv->klen = kv->vlen = 0;
    while (c.p < c.end) {
        uint32_t field, wire;
        if (qs_pb_tag(&c, &field, &wire)) BAD("malformed property");
        if (field == 1 || field == 2) {
            const uint8_t *d;
            size_t n;
            if (wire != 2) BAD("key/value wire type");
            if (qs_pb_bytes(&c, &d, &n)) BAD("malformed property");
            if (!qs_utf8_valid(d, n)) BAD("property not UTF-8");
            if (field == 1) {
                kv->k = d;
                kv->klen = n;
            } else {
                kv->v = d;
                kv->vlen = n;
            }
        } else if (qs_pb_skip(&c, wire)) {
            BAD("malformed property");
        }
    }
    return 0;
}

/* Parse a MessageMetadata (single == 0: key 6, properties 4, event 12, publish 3, batch 11) or a
 * SingleMessageMetadata (single == 1: key 2, properties 1, event 5, payload_size 3); properties go to *kvs. */
static int parse_meta(const uint8_t *p, const uint8_t *end, int single, meta_t *m, kvs_t *kvs, const char **why) {
    const uint32_t key_f = single ? 2 : 6, props_f = single ? 1 : 4, event_f = single ? 5 : 12;
    qs_pb_cursor c = {p, end};
    memset(m, 0, sizeof(*m));
    kvs->n = 0;
    while (c.p < c.end) {
        uint32_t field, wire;
        uint64_t v;
        const uint8_t *d;
        size_t n;
        if (qs_pb_tag(&c, &field, &wire)) BAD("malformed metadata");
        if (field == key_f) {
            if (wire != 2) BAD("key wire type");
            if (qs_pb_bytes(&c, &d, &n)) BAD("malformed metadata");
            if (!qs_utf8_valid(d, n)) BAD("key not UTF-8");
            m->key = d;
            m->key_len = n;
            m->has_key = 1;
        } else if (field == props_f) {
            kv_t kv;
            if (wire != 2) BAD("properties wire type");
            if (qs_pb_bytes(&c, &d, &n)) BAD("malformed metadata");
            if (parse_kv(d, d + n, &kv, why)) return -1;
            if (kvs_add(kvs, kv)) BAD("out of memory");
        } else if (field == event_f || field == 3 || (!single && field == 11)) {
            if (wire != 0) BAD("varint field wire type");
            if (qs_pb_varint(&c, &v)) BAD("malformed metadata");
            if (field == event_f) {
                m->event = v;
            } else if (field == 3 && single) {
                m->size = v;
                m->has_size = 1;
            } else if (field == 3) {
                m->publish = v;
            } else {
                m->batch = v;
                m->has_batch = 1;
            }
        } else if (qs_pb_skip(&c, wire)) {
            BAD("malformed metadata");
        }
    }
    return 0;
}

typedef struct {
    buf_t b[NBUF];
    int64_t partition;
    int64_t start[3], end[3];
    int overflow, nomem;
    size_t rows;
} out_t;

static int key_cmp(int64_t l, int64_t e, int64_t i, const int64_t *k) {
    if (l != k[0]) return l < k[0] ? -1 : 1;
    if (e != k[1]) return e < k[1] ? -1 : 1;
    if (i != k[2]) return i < k[2] ? -1 : 1;
    return 0;
}

static size_t put_varint(uint8_t *p, uint64_t v) { return qs_pb_put_varint(p, v); }

static int put_offset(out_t *o, int which, size_t value) {
    if (value > INT32_MAX) {
        o->overflow = 1;
        return -1;
    }
    return put_i32(&o->b[which], (int32_t)value);
}

static int64_t wrap_us(uint64_t ms) { return (int64_t)(ms * 1000u); }

/* One row; -1 on out of memory or offset overflow (flags set in *o). */
static int emit(out_t *o, const meta_t *m, const uint8_t *value, size_t value_len, int64_t ledger, int64_t entry,
                int64_t index, int64_t count, uint64_t publish, const kvs_t *kvs, int32_t redelivery) {
    buf_t *b = o->b;
    uint8_t valid = m->has_key && m->key_len > 0;
    uint8_t id[64];
    size_t n = 0;
    if (buf_put(&b[B_KEY_VALID], &valid, 1)) goto nomem;
    if (valid && buf_put(&b[B_KEY], m->key, m->key_len)) goto nomem;
    if (put_offset(o, B_KEY_OFF, b[B_KEY].len)) return -1;
    if (buf_put(&b[B_VALUE], value, value_len)) goto nomem;
    if (put_offset(o, B_VALUE_OFF, b[B_VALUE].len)) return -1;
    id[n++] = 0x08;
    n += put_varint(id + n, (uint64_t)ledger);
    id[n++] = 0x10;
    n += put_varint(id + n, (uint64_t)entry);
    if (o->partition != -1) {
        id[n++] = 0x18;
        n += put_varint(id + n, (uint64_t)o->partition);
    }
    if (index != -1) {
        id[n++] = 0x20;
        n += put_varint(id + n, (uint64_t)index);
    }
    if (count != 0) {
        id[n++] = 0x30;
        n += put_varint(id + n, (uint64_t)count);
    }
    if (buf_put(&b[B_ID], id, n)) goto nomem;
    if (put_offset(o, B_ID_OFF, b[B_ID].len)) return -1;
    /* properties: first-seen key order, last value of a repeated key */
    for (size_t i = 0; i < kvs->n; i++) {
        const kv_t *kv = &kvs->items[i];
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = kvs->items[j].klen == kv->klen && !memcmp(kvs->items[j].k, kv->k, kv->klen);
        if (seen) continue;
        const kv_t *last = kv;
        for (size_t j = i + 1; j < kvs->n; j++)
            if (kvs->items[j].klen == kv->klen && !memcmp(kvs->items[j].k, kv->k, kv->klen)) last = &kvs->items[j];
        if (buf_put(&b[B_PK], kv->k, kv->klen) || buf_put(&b[B_PV], last->v, last->vlen)) goto nomem;
        if (put_offset(o, B_PK_OFF, b[B_PK].len) || put_offset(o, B_PV_OFF, b[B_PV].len)) return -1;
    }
    if (put_offset(o, B_PROPS_OFF, b[B_PK_OFF].len / 4 - 1)) return -1;
    uint8_t event_valid = m->event != 0;
    if (put_i64(&b[B_LEDGER], ledger) || put_i64(&b[B_ENTRY], entry) || put_i32(&b[B_BATCH], (int32_t)index) ||
        put_i64(&b[B_PUBLISH], wrap_us(publish)) || buf_put(&b[B_EVENT_VALID], &event_valid, 1) ||
        put_i64(&b[B_EVENT], event_valid ? wrap_us(m->event) : 0) || put_i32(&b[B_REDELIVERY], redelivery))
        goto nomem;
    o->rows++;
    return 0;
nomem:
    o->nomem = 1;
    return -1;
}

/* Rows of one entry; 0 ok, -1 malformed (*why set), -2 out of memory / overflow. */
static int decode_entry(out_t *o, int64_t ledger, int64_t entry, const uint8_t *meta, size_t meta_len,
                        const uint8_t *payload, size_t total, int32_t redelivery, kvs_t *kvs, const char **why) {
    meta_t md, sm;
    if (parse_meta(meta, meta + meta_len, 0, &md, kvs, why)) return -1;
    if (!md.has_batch) {
        if (key_cmp(ledger, entry, ENTRY_END, o->start) > 0 && key_cmp(ledger, entry, ENTRY_END, o->end) <= 0)
            if (emit(o, &md, payload, total, ledger, entry, -1, 0, md.publish, kvs, redelivery)) return -2;
        return 0;
    }
    int32_t count = (int32_t)(uint32_t)md.batch;
    if (count < 0) BAD("negative num_messages_in_batch");
    size_t pos = 0;
    for (int32_t index = 0; index < count; index++) {
        if (total - pos < 4) BAD("batch item runs past the payload");
        size_t meta_end = pos + 4 + qs_be32(payload + pos);
        if (meta_end > total) BAD("batch item runs past the payload");
        if (parse_meta(payload + pos + 4, payload + meta_end, 1, &sm, kvs, why)) return -1;
        if (!sm.has_size) BAD("batch item without payload_size");
        if (sm.size > total - meta_end) BAD("batch item runs past the payload");
        pos = meta_end + sm.size;
        if (key_cmp(ledger, entry, index, o->start) > 0 && key_cmp(ledger, entry, index, o->end) <= 0)
            if (emit(o, &sm, payload + meta_end, sm.size, ledger, entry, index, count, md.publish, kvs, redelivery))
                return -2;
    }
    if (pos != total) BAD("bytes left over after the batch items");
    return 0;
}

typedef struct {
    int64_t ledger, entry;
    int32_t redelivery;
    PyObject *meta, *payload; /* strong references while the GIL is released */
    const uint8_t *mp, *pp;
    size_t ml, pl;
    const char *bad;
} in_t;

static int key_arg(PyObject *obj, const char *name, int64_t *out) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        PyErr_Format(PyExc_TypeError, "%s must be a (ledgerId, entryId, batchIndex) tuple", name);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        long long v;
        if (qs_arg_signed(PyTuple_GET_ITEM(obj, i), name, INT64_MIN, INT64_MAX, &v)) return -1;
        out[i] = v;
    }
    return 0;
}

static void release(in_t *in, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(in[i].meta);
        Py_XDECREF(in[i].payload);
    }
    PyMem_Free(in);
}

/* The bytes of buffer i; key/event validity are packed from one byte per row to a bitmap. */
static PyObject *to_bytes(out_t *o, int i) {
    buf_t *b = &o->b[i];
    if (i != B_KEY_VALID && i != B_EVENT_VALID) return PyBytes_FromStringAndSize((const char *)b->p, (Py_ssize_t)b->len);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((b->len + 7) / 8));
    if (!bytes) return NULL;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(bytes);
    memset(bits, 0, (b->len + 7) / 8);
    for (size_t r = 0; r < b->len; r++)
        if (b->p[r]) bits[r >> 3] |= (uint8_t)(1u << (r & 7));
    return bytes;
}

PyDoc_STRVAR(decode_entries_doc,
             "decode_entries(entries, partition, start, end) -> (rows, buffers, bad)\n\n"
             "Column buffers of the messages in (start, end] of stored entries; see quasar.spark._columns_py.");

static PyObject *decode_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "decode_entries() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *entries = args[0];
    if (!PyList_Check(entries)) {
        PyErr_Format(PyExc_TypeError, "entries must be a list, got %.100s", Py_TYPE(entries)->tp_name);
        return NULL;
    }
    out_t o;
    memset(&o, 0, sizeof(o));
    long long partition;
    if (key_arg(args[2], "start", o.start) || key_arg(args[3], "end", o.end)) return NULL;
    if (qs_arg_signed(args[1], "partition", INT32_MIN, INT32_MAX, &partition)) return NULL;
    o.partition = partition;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    in_t *in = PyMem_Calloc((size_t)(n ? n : 1), sizeof(in_t));
    if (!in) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(entries, i);
        long long ledger, entry, redelivery;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) {
            PyErr_SetString(PyExc_TypeError,
                            "each entry must be a tuple (ledgerId, entryId, metadata, payload, redelivery)");
            goto fail_in;
        }
        PyObject *meta = PyTuple_GET_ITEM(item, 2), *payload = PyTuple_GET_ITEM(item, 3);
        if (qs_arg_signed(PyTuple_GET_ITEM(item, 0), "ledgerId", INT64_MIN, INT64_MAX, &ledger) ||
            qs_arg_signed(PyTuple_GET_ITEM(item, 1), "entryId", INT64_MIN, INT64_MAX, &entry))
            goto fail_in;
        if (!PyBytes_CheckExact(meta) || !PyBytes_CheckExact(payload)) {
            PyErr_SetString(PyExc_TypeError, "an entry's metadata and payload must be bytes");
            goto fail_in;
        }
        if (qs_arg_signed(PyTuple_GET_ITEM(item, 4), "redelivery", INT32_MIN, INT32_MAX, &redelivery)) goto fail_in;
        Py_INCREF(meta);
        Py_INCREF(payload);
        in[i] = (in_t){ledger, entry, (int32_t)redelivery, meta, payload, (const uint8_t *)PyBytes_AS_STRING(meta),
                       (const uint8_t *)PyBytes_AS_STRING(payload), (size_t)PyBytes_GET_SIZE(meta),
                       (size_t)PyBytes_GET_SIZE(payload), NULL};
    }
    kvs_t kvs = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    static const int offsets[] = {B_KEY_OFF, B_VALUE_OFF, B_ID_OFF, B_PROPS_OFF, B_PK_OFF, B_PV_OFF};
    for (int k = 0; k < 6; k++)
        if (put_i32(&o.b[offsets[k]], 0)) o.nomem = 1;
    for (Py_ssize_t i = 0; i < n && !o.nomem && !o.overflow; i++) {
        size_t mark[NBUF];
        size_t rows = o.rows;
        for (int k = 0; k < NBUF; k++) mark[k] = o.b[k].len;
        const char *why = NULL;
        int rc = decode_entry(&o, in[i].ledger, in[i].entry, in[i].mp, in[i].ml, in[i].pp, in[i].pl, in[i].redelivery,
                              &kvs, &why);
        if (rc == -1) {
            in[i].bad = why;
            for (int k = 0; k < NBUF; k++) o.b[k].len = mark[k];
            o.rows = rows;
        }
    }
    Py_END_ALLOW_THREADS
    free(kvs.items);
    PyObject *result = NULL, *buffers = NULL, *bad = NULL;
    if (o.nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (o.overflow) {
        PyErr_SetString(PyExc_OverflowError, "a column passes 2 GiB in one call; decode fewer entries at once");
        goto done;
    }
    buffers = PyTuple_New(NBUF);
    bad = PyList_New(0);
    if (!buffers || !bad) goto done;
    for (int k = 0; k < NBUF; k++) {
        PyObject *bytes = to_bytes(&o, k);
        if (!bytes) goto done;
        PyTuple_SET_ITEM(buffers, k, bytes);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!in[i].bad) continue;
        PyObject *row = Py_BuildValue("(LLs)", (long long)in[i].ledger, (long long)in[i].entry, in[i].bad);
        if (!row || PyList_Append(bad, row)) {
            Py_XDECREF(row);
            goto done;
        }
        Py_DECREF(row);
    }
    result = Py_BuildValue("(nOO)", (Py_ssize_t)o.rows, buffers, bad);
done:
    Py_XDECREF(buffers);
    Py_XDECREF(bad);
    for (int k = 0; k < NBUF; k++) free(o.b[k].p);
    release(in, n);
    return result;
fail_in:
    release(in, n);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_entries", (PyCFunction)(void (*)(void))decode_entries, METH_FASTCALL, decode_entries_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {{0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "quasar.spark._columns_c", "Stored entries -> Spark column buffers (twin: _columns_py).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns_c(void) { return PyModuleDef_Init(&module_def); }
