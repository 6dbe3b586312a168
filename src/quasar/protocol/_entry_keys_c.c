/* quasar.protocol._entry_keys_c: the message keys of a stored Pulsar entry, for the store's IndexFile.
 *
 * Compiled twin of _entry_keys_py.py (same API, same results, same exception classes and messages); the
 * public module is quasar.protocol.entry_keys, which picks one with quasar.native.load_twin and decompresses
 * compressed batches between the two calls below (the codecs are Python libraries).
 *
 * Input (layout in protocol/_layout.py and protocol/frame.py; all integers big-endian):
 *
 *     [0x0e02 u16][size u32][BrokerEntryMetadata]?  [0x0e01 u16][crc u32]?  [size u32][MessageMetadata][payload]
 *
 * Batch payload, once decompressed (protocol/metadata.py), num_messages_in_batch items of
 *
 *     [size u32][SingleMessageMetadata][item payload of payload_size bytes]
 *
 * Fields read (proto/PulsarApi.proto), everything else is skipped by wire type, as protobuf does; a known
 * field with an unexpected wire type is an unknown field (skipped), the last occurrence of a field wins, and
 * compression is a closed enum (a value outside 0..4 is ignored, as proto2 parsers do):
 *   MessageMetadata: partition_key 6 (string), compression 8 (enum), uncompressed_size 9 (uint32),
 *                    num_messages_in_batch 11 (int32; its presence marks a batch), encryption_keys 13.
 *   SingleMessageMetadata: partition_key 2 (string), payload_size 3 (int32, required).
 *
 * Only the keys are checked for UTF-8 (strict, RFC 3629): properties and other strings are not read. The
 * walk holds no Python object: for a buffer of EK_NOGIL_MIN bytes or more it runs with the GIL released
 * (the Py_buffer is held meanwhile); the key strings are made after the GIL is taken back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "qs_pb.h"
#include "qs_utf8.h"

/* Buffers shorter than this are walked with the GIL held: the walk costs less than a release/take. */
#define EK_NOGIL_MIN 4096

enum {
    EK_OK = 0,
    EK_NOMEM,
    /* MalformedFrameError */
    EK_BEM_HEADER,
    EK_BEM_SIZE,
    EK_CRC_HEADER,
    EK_NO_METADATA_SIZE,
    EK_METADATA_SIZE,
    EK_METADATA_PB,
    EK_METADATA_KEY_UTF8,
    /* MalformedBatchError */
    EK_NEGATIVE_COUNT,
    EK_COUNT_TOO_LARGE,
    EK_ITEM_NO_ROOM,
    EK_ITEM_METADATA_SIZE,
    EK_ITEM_PB,
    EK_ITEM_NO_PAYLOAD_SIZE,
    EK_ITEM_KEY_UTF8,
    EK_ITEM_PAYLOAD_SIZE,
    EK_LEFTOVER,
};

typedef struct {
    int code;        /* EK_* */
    int pb;          /* QS_PB_* for EK_METADATA_PB / EK_ITEM_PB */
    long long index; /* batch item */
    long long count; /* batch item count */
    long long a, b;  /* the numbers of the message */
} ek_error;

typedef struct {
    size_t off, len; /* offset into the input buffer, length in bytes */
} ek_span;

/* A growable array of key spans; the first 16 live inside the struct (no allocation for most entries). */
typedef struct {
    ek_span *items;
    size_t len, cap;
    ek_span fixed[16];
} ek_spans;

typedef struct {
    size_t key_off, key_len;
    int has_key;
    int compression;
    uint32_t uncompressed_size;
    int32_t num_messages;
    int has_num_messages;
    int encrypted;
} ek_meta;

/* The smallest batch item: a 4-byte metadata size and a SingleMessageMetadata holding only payload_size
 * (tag and a one-byte varint), with an empty payload. A batch of `size` bytes holds at most size / 6 items. */
#define EK_MIN_ITEM_SIZE 6

static PyObject *MalformedFrameError;
static PyObject *MalformedBatchError;

static void spans_init(ek_spans *s) {
    s->items = s->fixed;
    s->len = 0;
    s->cap = sizeof(s->fixed) / sizeof(s->fixed[0]);
}

static void spans_free(ek_spans *s) {
    if (s->items != s->fixed) PyMem_RawFree(s->items);
    s->items = s->fixed;
}

/* GIL-free (PyMem_Raw*). Returns -1 when out of memory. */
static int spans_push(ek_spans *s, size_t off, size_t len) {
    if (s->len == s->cap) {
        size_t cap = s->cap * 2;
        ek_span *grown;
        if (cap > PY_SSIZE_T_MAX / sizeof(ek_span)) return -1;
        if (s->items == s->fixed) {
            grown = PyMem_RawMalloc(cap * sizeof(ek_span));
            if (grown != NULL) memcpy(grown, s->fixed, s->len * sizeof(ek_span));
        } else {
            grown = PyMem_RawRealloc(s->items, cap * sizeof(ek_span));
        }
        if (grown == NULL) return -1;
        s->items = grown;
        s->cap = cap;
    }
    s->items[s->len].off = off;
    s->items[s->len].len = len;
    s->len++;
    return 0;
}

/* Walk the MessageMetadata at base[start:end). On a wire error sets e (offset of the failing field's tag,
 * from `start`, in e->a) and returns -1. */
static int walk_metadata(const uint8_t *base, size_t start, size_t end, ek_meta *m, ek_error *e) {
    qs_pb_cursor c = {base + start, base + end};
    memset(m, 0, sizeof(*m));
    while (c.p < c.end) {
        const uint8_t *field_start = c.p;
        uint32_t field = 0, wire_type = 0;
        uint64_t value;
        const uint8_t *data;
        size_t len;
        int rc = qs_pb_tag(&c, &field, &wire_type);
        if (rc == QS_PB_OK) {
            if (wire_type == 2 && (field == 6 || field == 13)) {
                rc = qs_pb_bytes(&c, &data, &len);
                if (rc == QS_PB_OK) {
                    if (field == 6) {
                        m->has_key = 1;
                        m->key_off = (size_t)(data - base);
                        m->key_len = len;
                    } else {
                        m->encrypted = 1;
                    }
                }
            } else if (wire_type == 0 && (field == 8 || field == 9 || field == 11)) {
                rc = qs_pb_varint(&c, &value);
                if (rc == QS_PB_OK) {
                    int32_t v32 = (int32_t)(uint32_t)value; /* int32/enum: the low 32 bits, two's complement */
                    if (field == 8) {
                        if (v32 >= 0 && v32 <= 4) m->compression = v32;
                    } else if (field == 9) {
                        m->uncompressed_size = (uint32_t)value;
                    } else {
                        m->num_messages = v32;
                        m->has_num_messages = 1;
                    }
                }
            } else {
                rc = qs_pb_skip(&c, wire_type);
            }
        }
        if (rc != QS_PB_OK) {
            e->code = EK_METADATA_PB;
            e->pb = rc;
            e->a = (long long)(field_start - (base + start));
            return -1;
        }
    }
    return 0;
}

/* Walk `count` batch items in base[off:off+size), pushing the span of each item's partition_key. */
static int walk_batch(const uint8_t *base, size_t off, size_t size, long long count, ek_spans *keys, ek_error *e) {
    const uint8_t *p = base + off;
    size_t pos = 0;
    e->count = count;
    if (count < 0) {
        e->code = EK_NEGATIVE_COUNT;
        return -1;
    }
    if ((unsigned long long)count > size / EK_MIN_ITEM_SIZE) { /* refused before any work on the items */
        e->code = EK_COUNT_TOO_LARGE;
        e->a = (long long)size;
        return -1;
    }
    for (long long index = 0; index < count; index++) {
        e->index = index;
        if (size - pos < 4) {
            e->code = EK_ITEM_NO_ROOM;
            return -1;
        }
        uint32_t metadata_size = qs_be32(p + pos);
        size_t start = pos + 4;
        if (metadata_size > size - start) {
            e->code = EK_ITEM_METADATA_SIZE;
            e->a = metadata_size;
            return -1;
        }
        size_t end = start + metadata_size;
        qs_pb_cursor c = {p + start, p + end};
        const uint8_t *key = NULL;
        size_t key_len = 0;
        int has_key = 0, has_payload_size = 0;
        int32_t payload_size = 0;
        while (c.p < c.end) {
            const uint8_t *field_start = c.p;
            uint32_t field = 0, wire_type = 0;
            uint64_t value;
            int rc = qs_pb_tag(&c, &field, &wire_type);
            if (rc == QS_PB_OK) {
                if (field == 2 && wire_type == 2) {
                    rc = qs_pb_bytes(&c, &key, &key_len);
                    has_key = 1;
                } else if (field == 3 && wire_type == 0) {
                    rc = qs_pb_varint(&c, &value);
                    if (rc == QS_PB_OK) {
                        payload_size = (int32_t)(uint32_t)value;
                        has_payload_size = 1;
                    }
                } else {
                    rc = qs_pb_skip(&c, wire_type);
                }
            }
            if (rc != QS_PB_OK) {
                e->code = EK_ITEM_PB;
                e->pb = rc;
                e->a = (long long)(field_start - (p + start));
                return -1;
            }
        }
        if (!has_payload_size) {
            e->code = EK_ITEM_NO_PAYLOAD_SIZE;
            return -1;
        }
        if (has_key && !qs_utf8_valid(key, key_len)) {
            e->code = EK_ITEM_KEY_UTF8;
            return -1;
        }
        if (payload_size < 0 || (size_t)payload_size > size - end) {
            e->code = EK_ITEM_PAYLOAD_SIZE;
            e->a = payload_size;
            return -1;
        }
        pos = end + (size_t)payload_size;
        if (has_key && spans_push(keys, (size_t)(key - base), key_len) < 0) {
            e->code = EK_NOMEM;
            return -1;
        }
    }
    if (pos != size) {
        e->code = EK_LEFTOVER;
        e->a = (long long)(size - pos);
        return -1;
    }
    return 0;
}

typedef struct {
    int pending_compression;
    uint32_t uncompressed_size;
    int32_t count;
    size_t payload_start;
} ek_scan;

/* The whole entry: headers (split_headers in protocol/_layout.py), MessageMetadata, and an uncompressed,
 * unencrypted batch. A compressed, unencrypted batch is left for the caller (out->pending_compression). */
static int scan(const uint8_t *base, size_t size, ek_spans *keys, ek_scan *out, ek_error *e) {
    size_t pos = 0;
    memset(out, 0, sizeof(*out));
    if (size >= 2 && qs_be16(base) == 0x0E02) {
        if (size < 6) {
            e->code = EK_BEM_HEADER;
            return -1;
        }
        uint32_t bem_size = qs_be32(base + 2);
        if (bem_size > size - 6) {
            e->code = EK_BEM_SIZE;
            e->a = bem_size;
            e->b = (long long)(size - 6);
            return -1;
        }
        pos = 6 + (size_t)bem_size;
    }
    if (size - pos >= 2 && qs_be16(base + pos) == 0x0E01) {
        if (size - pos < 6) {
            e->code = EK_CRC_HEADER;
            return -1;
        }
        pos += 6;
    }
    if (size - pos < 4) {
        e->code = EK_NO_METADATA_SIZE;
        return -1;
    }
    uint32_t metadata_size = qs_be32(base + pos);
    size_t metadata_start = pos + 4;
    if (metadata_size > size - metadata_start) {
        e->code = EK_METADATA_SIZE;
        e->a = metadata_size;
        e->b = (long long)(size - metadata_start);
        return -1;
    }
    size_t metadata_end = metadata_start + metadata_size;
    ek_meta m;
    if (walk_metadata(base, metadata_start, metadata_end, &m, e) < 0) return -1;
    if (m.has_key) {
        if (!qs_utf8_valid(base + m.key_off, m.key_len)) {
            e->code = EK_METADATA_KEY_UTF8;
            return -1;
        }
        if (spans_push(keys, m.key_off, m.key_len) < 0) {
            e->code = EK_NOMEM;
            return -1;
        }
    }
    if (!m.has_num_messages || m.encrypted) return 0;
    if (m.compression != 0) {
        out->pending_compression = m.compression;
        out->uncompressed_size = m.uncompressed_size;
        out->count = m.num_messages;
        out->payload_start = metadata_end;
        return 0;
    }
    return walk_batch(base, metadata_end, size - metadata_end, m.num_messages, keys, e);
}

static const char *pb_reason(int pb) {
    switch (pb) {
    case QS_PB_TRUNCATED:
        return "truncated field";
    case QS_PB_BAD_VARINT:
        return "varint longer than 10 bytes";
    default:
        return "invalid tag";
    }
}

/* Set the Python exception for `e` (messages shared with _entry_keys_py.py). Returns NULL. */
static PyObject *raise_error(const ek_error *e) {
    switch (e->code) {
    case EK_NOMEM:
        return PyErr_NoMemory();
    case EK_BEM_HEADER:
        PyErr_SetString(MalformedFrameError, "broker entry metadata header runs past the end of the entry");
        break;
    case EK_BEM_SIZE:
        PyErr_Format(MalformedFrameError,
                     "brokerEntryMetadataSize %lld runs past the end of the entry (%lld bytes left)", e->a, e->b);
        break;
    case EK_CRC_HEADER:
        PyErr_SetString(MalformedFrameError, "checksum header runs past the end of the entry");
        break;
    case EK_NO_METADATA_SIZE:
        PyErr_SetString(MalformedFrameError, "entry has no metadataSize field");
        break;
    case EK_METADATA_SIZE:
        PyErr_Format(MalformedFrameError, "metadataSize %lld runs past the end of the entry (%lld bytes left)",
                     e->a, e->b);
        break;
    case EK_METADATA_PB:
        PyErr_Format(MalformedFrameError, "unparsable MessageMetadata: %s at byte %lld", pb_reason(e->pb), e->a);
        break;
    case EK_METADATA_KEY_UTF8:
        PyErr_SetString(MalformedFrameError, "MessageMetadata partition_key is not valid UTF-8");
        break;
    case EK_NEGATIVE_COUNT:
        PyErr_Format(MalformedBatchError, "negative message count %lld", e->count);
        break;
    case EK_COUNT_TOO_LARGE:
        PyErr_Format(MalformedBatchError,
                     "num_messages_in_batch %lld cannot fit in %lld bytes (a batch item takes at least %d)",
                     e->count, e->a, EK_MIN_ITEM_SIZE);
        break;
    case EK_ITEM_NO_ROOM:
        PyErr_Format(MalformedBatchError, "batch item %lld of %lld: no room for its metadata size", e->index,
                     e->count);
        break;
    case EK_ITEM_METADATA_SIZE:
        PyErr_Format(MalformedBatchError, "batch item %lld: metadata size %lld runs past the end", e->index, e->a);
        break;
    case EK_ITEM_PB:
        PyErr_Format(MalformedBatchError, "batch item %lld: unparsable SingleMessageMetadata: %s at byte %lld",
                     e->index, pb_reason(e->pb), e->a);
        break;
    case EK_ITEM_NO_PAYLOAD_SIZE:
        PyErr_Format(MalformedBatchError, "batch item %lld: SingleMessageMetadata without payload_size", e->index);
        break;
    case EK_ITEM_KEY_UTF8:
        PyErr_Format(MalformedBatchError, "batch item %lld: partition_key is not valid UTF-8", e->index);
        break;
    case EK_ITEM_PAYLOAD_SIZE:
        PyErr_Format(MalformedBatchError, "batch item %lld: payload_size %lld runs past the payload", e->index,
                     e->a);
        break;
    case EK_LEFTOVER:
        PyErr_Format(MalformedBatchError, "%lld bytes left over after %lld batch items", e->a, e->count);
        break;
    default:
        PyErr_SetString(PyExc_SystemError, "_entry_keys_c: unknown error code");
        break;
    }
    return NULL;
}

/* The keys as a list of str. The spans were checked for UTF-8 during the walk; should the buffer have
 * changed since (a mutable buffer written by another thread), the decode error becomes `error_type`. */
static PyObject *keys_list(const uint8_t *base, const ek_spans *keys, PyObject *error_type) {
    PyObject *list = PyList_New((Py_ssize_t)keys->len);
    if (list == NULL) return NULL;
    for (size_t i = 0; i < keys->len; i++) {
        PyObject *key = PyUnicode_DecodeUTF8((const char *)base + keys->items[i].off,
                                             (Py_ssize_t)keys->items[i].len, NULL);
        if (key == NULL) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_SetString(error_type, "a key changed while it was read");
            }
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, key);
    }
    return list;
}

PyDoc_STRVAR(scan_entry_doc,
             "scan_entry(body, /)\n--\n\n"
             "Read the keys of a stored Pulsar entry, as far as no decompression is needed.\n\n"
             "body: a bytes-like object (C-contiguous), ``[0x0e02 size bem]? [0x0e01 crc]? [u32 metadataSize]\n"
             "[MessageMetadata][payload]``.\n\n"
             "Returns ``(keys, pending_compression, uncompressed_size, count, payload_start)``: ``keys`` is a\n"
             "list of str, MessageMetadata.partition_key if present, then, for an unencrypted batch\n"
             "(num_messages_in_batch present, no encryption_keys) that is not compressed, every\n"
             "SingleMessageMetadata.partition_key in order. ``pending_compression`` is 0 when ``keys`` is\n"
             "complete (the other three are then 0); else the entry is a compressed unencrypted batch: the\n"
             "caller decompresses ``body[payload_start:]`` with that CompressionType to ``uncompressed_size``\n"
             "bytes and extends ``keys`` with ``batch_keys(decompressed, count)``.\n\n"
             "Raises MalformedFrameError (headers or metadataSize past the end, unparsable MessageMetadata, a\n"
             "partition_key that is not UTF-8) or MalformedBatchError (see batch_keys); TypeError or\n"
             "BufferError for an object that is not a C-contiguous buffer.");

static PyObject *scan_entry(PyObject *module, PyObject *arg) {
    Py_buffer buffer;
    if (PyObject_GetBuffer(arg, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *base = (const uint8_t *)buffer.buf;
    size_t size = (size_t)buffer.len;
    ek_spans keys;
    ek_scan out;
    ek_error e;
    int rc;
    spans_init(&keys);
    memset(&e, 0, sizeof(e));
    if (size >= EK_NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan(base, size, &keys, &out, &e);
        Py_END_ALLOW_THREADS
    } else {
        rc = scan(base, size, &keys, &out, &e);
    }
    PyObject *result = NULL;
    if (rc < 0) {
        raise_error(&e);
    } else {
        PyObject *list = keys_list(base, &keys, MalformedFrameError);
        if (list != NULL) {
            result = Py_BuildValue("(NiIin)", list, out.pending_compression, (unsigned int)out.uncompressed_size,
                                   (int)out.count, (Py_ssize_t)out.payload_start);
        }
    }
    spans_free(&keys);
    PyBuffer_Release(&buffer);
    return result;
}

PyDoc_STRVAR(batch_keys_doc,
             "batch_keys(payload, count, /)\n--\n\n"
             "The partition keys of the items of an uncompressed batch payload, in order.\n\n"
             "payload: a bytes-like object (C-contiguous), ``count`` items of ``[u32 size]\n"
             "[SingleMessageMetadata][item payload of payload_size bytes]`` and nothing after them.\n"
             "count: num_messages_in_batch (an int; OverflowError outside a signed 64-bit range).\n\n"
             "Returns a list of str, one per item that has partition_key (items without one add nothing).\n\n"
             "Raises MalformedBatchError: negative count, a size that runs past the payload, an unparsable\n"
             "SingleMessageMetadata (bad tag or varint, truncated field), one without payload_size, a\n"
             "partition_key that is not UTF-8, a negative payload_size, or bytes left over after count items.");

static PyObject *batch_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "batch_keys() takes exactly 2 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer buffer;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) < 0) return NULL;
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    const uint8_t *base = (const uint8_t *)buffer.buf;
    size_t size = (size_t)buffer.len;
    ek_spans keys;
    ek_error e;
    int rc;
    spans_init(&keys);
    memset(&e, 0, sizeof(e));
    if (size >= EK_NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        rc = walk_batch(base, 0, size, count, &keys, &e);
        Py_END_ALLOW_THREADS
    } else {
        rc = walk_batch(base, 0, size, count, &keys, &e);
    }
    PyObject *result = rc < 0 ? raise_error(&e) : keys_list(base, &keys, MalformedBatchError);
    spans_free(&keys);
    PyBuffer_Release(&buffer);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_entry", (PyCFunction)scan_entry, METH_O, scan_entry_doc},
    {"batch_keys", (PyCFunction)(void (*)(void))batch_keys, METH_FASTCALL, batch_keys_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
             "Message keys of a stored Pulsar entry for the IndexFile, compiled (twin: _entry_keys_py).\n\n"
             "scan_entry(body) reads the headers, the MessageMetadata and an uncompressed batch;\n"
             "batch_keys(payload, count) reads a decompressed batch. Use quasar.protocol.entry_keys.\n"
             "Source: src/quasar/protocol/_entry_keys_c.c.");

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "quasar.protocol._entry_keys_c", module_doc, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__entry_keys_c(void) {
    PyObject *errors = PyImport_ImportModule("quasar.protocol.errors");
    if (errors == NULL) return NULL;
    Py_XSETREF(MalformedFrameError, PyObject_GetAttrString(errors, "MalformedFrameError"));
    Py_XSETREF(MalformedBatchError, PyObject_GetAttrString(errors, "MalformedBatchError"));
    Py_DECREF(errors);
    if (MalformedFrameError == NULL || MalformedBatchError == NULL) return NULL;
    return PyModule_Create(&module_def);
}
