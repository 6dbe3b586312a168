/* quasar.client._codec_c: the client's per-message codec, compiled (DESIGN.md "Compiled hot paths").
 *
 * Twin of quasar/client/_codec_py.py: same API, same results byte for byte, same exception classes; its
 * docstrings are the specification (layouts from reference/pulsar-protocol.md §1 and §7, as protobuf and the
 * C++ client write them, fields in field-number order). In short:
 *   encode_metadata(18 args) -> bytes          serialized MessageMetadata
 *   encode_single_metadata(6 args) -> bytes    serialized SingleMessageMetadata of a batch item
 *   encode_send(7 args) -> bytes               a whole SEND frame with its CRC-32C
 *   encode_ack(3 args) -> bytes                a grouped ACK frame of many entries
 *   BatchContainer                             the producer's open batch (one growing buffer, one waiter each)
 * Errors: TypeError for a value of the wrong type, ValueError for an int out of its field's range or a
 * malformed batch. Every read of received bytes is bounds-checked; sizes are checked before allocating. The
 * CRC of a large payload runs with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "qs_crc32c.h"
#include "qs_pb.h"
#include "qs_pyargs.h"

#define U32_MAX_ 0xFFFFFFFFull
#define GIL_FREE_CRC_BYTES (256 * 1024)

/* ------------------------------------------------------------------------------------ out buffer -- */

typedef struct {
    uint8_t *p;
    size_t len;
    size_t cap;
} outbuf;

static int ob_reserve(outbuf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    if (more > (size_t)PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + more) cap = cap > (size_t)PY_SSIZE_T_MAX / 2 ? b->len + more : cap * 2;
    uint8_t *p = PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int ob_put(outbuf *b, const void *data, size_t len) {
    if (ob_reserve(b, len)) return -1;
    if (len) memcpy(b->p + b->len, data, len);
    b->len += len;
    return 0;
}

static int ob_varint(outbuf *b, uint64_t v) {
    if (ob_reserve(b, 10)) return -1;
    while (v >= 0x80) {
        b->p[b->len++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->p[b->len++] = (uint8_t)v;
    return 0;
}

static int ob_tag(outbuf *b, uint32_t field, uint32_t wire) { return ob_varint(b, ((uint64_t)field << 3) | wire); }

static int ob_delimited(outbuf *b, uint32_t field, const char *data, size_t len) {
    if (ob_tag(b, field, 2) || ob_varint(b, len)) return -1;
    return ob_put(b, data, len);
}

/* ------------------------------------------------------------------------------- argument checks -- */

static int get_str(PyObject *obj, const char *name, const char **data, Py_ssize_t *len) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyUnicode_AsUTF8AndSize(obj, len);
    return *data ? 0 : -1;
}

static int get_bytes(PyObject *obj, const char *name, const char **data, Py_ssize_t *len) {
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    return 0;
}

static int put_str_field(outbuf *b, uint32_t field, PyObject *obj, const char *name) {
    const char *data;
    Py_ssize_t len;
    if (get_str(obj, name, &data, &len)) return -1;
    return ob_delimited(b, field, data, (size_t)len);
}

static int put_signed_field(outbuf *b, uint32_t field, PyObject *obj, const char *name, long long low,
                            long long high) {
    long long v;
    if (qs_arg_signed(obj, name, low, high, &v)) return -1;
    if (ob_tag(b, field, 0)) return -1;
    return ob_varint(b, (uint64_t)v); /* negatives: 64-bit two's complement, as protobuf */
}

static int put_unsigned_field(outbuf *b, uint32_t field, PyObject *obj, const char *name,
                              unsigned long long high) {
    uint64_t v;
    if (qs_arg_unsigned(obj, name, high, &v)) return -1;
    if (ob_tag(b, field, 0)) return -1;
    return ob_varint(b, v);
}

/* Each property as field `field` = KeyValue{1 key, 2 value}; `properties` a dict, else dict(properties). */
static int put_properties(outbuf *b, uint32_t field, PyObject *properties) {
    PyObject *dict;
    if (PyDict_CheckExact(properties)) {
        dict = properties;
        Py_INCREF(dict);
    } else {
        dict = PyObject_CallOneArg((PyObject *)&PyDict_Type, properties);
        if (!dict) return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    int rc = -1;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        const char *k, *v;
        Py_ssize_t klen, vlen;
        if (get_str(key, "property key", &k, &klen) || get_str(value, "property value", &v, &vlen)) goto done;
        size_t inner = 1 + qs_pb_varint_size((uint64_t)klen) + (size_t)klen + 1 + qs_pb_varint_size((uint64_t)vlen) + (size_t)vlen;
        if (ob_tag(b, field, 2) || ob_varint(b, inner) || ob_delimited(b, 1, k, (size_t)klen) ||
            ob_delimited(b, 2, v, (size_t)vlen))
            goto done;
    }
    rc = 0;
done:
    Py_DECREF(dict);
    return rc;
}

/* ------------------------------------------------------------------------------- encode_metadata -- */

PyDoc_STRVAR(encode_metadata_doc,
"encode_metadata(producer_name, sequence_id, publish_time, properties, partition_key, replicate_to,\n"
"                compression, uncompressed_size, num_messages_in_batch, event_time, schema_version,\n"
"                ordering_key, deliver_at_time, highest_sequence_id, uuid, num_chunks_from_msg,\n"
"                total_chunk_msg_size, chunk_id) -> bytes\n\n"
"A serialized MessageMetadata, byte-identical to protobuf's SerializeToString; None leaves an optional\n"
"field out. See quasar.client._codec_py.encode_metadata for ranges and errors.");

static int put_metadata(outbuf *b, PyObject *const *a) {
    if (put_str_field(b, 1, a[0], "producer_name")) return -1;
    if (put_unsigned_field(b, 2, a[1], "sequence_id", UINT64_MAX)) return -1;
    if (put_unsigned_field(b, 3, a[2], "publish_time", UINT64_MAX)) return -1;
    if (a[3] != Py_None && put_properties(b, 4, a[3])) return -1;
    if (a[4] != Py_None && put_str_field(b, 6, a[4], "partition_key")) return -1;
    if (a[5] != Py_None) {
        if (!PyList_Check(a[5])) {
            PyErr_Format(PyExc_TypeError, "replicate_to must be a list, got %.100s", Py_TYPE(a[5])->tp_name);
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(a[5]); i++) {
            PyObject *item = PyList_GET_ITEM(a[5], i);
            Py_INCREF(item);
            int rc = put_str_field(b, 7, item, "replicate_to item");
            Py_DECREF(item);
            if (rc) return -1;
        }
    }
    if (a[6] != Py_None && put_signed_field(b, 8, a[6], "compression", 0, 4)) return -1;
    if (a[7] != Py_None && put_unsigned_field(b, 9, a[7], "uncompressed_size", U32_MAX_)) return -1;
    if (a[8] != Py_None && put_signed_field(b, 11, a[8], "num_messages_in_batch", INT32_MIN, INT32_MAX)) return -1;
    if (a[9] != Py_None && put_unsigned_field(b, 12, a[9], "event_time", UINT64_MAX)) return -1;
    if (a[10] != Py_None) {
        const char *data;
        Py_ssize_t len;
        if (get_bytes(a[10], "schema_version", &data, &len)) return -1;
        if (len && ob_delimited(b, 16, data, (size_t)len)) return -1;
    }
    if (a[11] != Py_None) {
        const char *data;
        Py_ssize_t len;
        if (get_bytes(a[11], "ordering_key", &data, &len) || ob_delimited(b, 18, data, (size_t)len)) return -1;
    }
    if (a[12] != Py_None && put_signed_field(b, 19, a[12], "deliver_at_time", INT64_MIN, INT64_MAX)) return -1;
    if (a[13] != Py_None && put_unsigned_field(b, 24, a[13], "highest_sequence_id", UINT64_MAX)) return -1;
    if (a[14] != Py_None && put_str_field(b, 26, a[14], "uuid")) return -1;
    if (a[15] != Py_None && put_signed_field(b, 27, a[15], "num_chunks_from_msg", INT32_MIN, INT32_MAX)) return -1;
    if (a[16] != Py_None && put_signed_field(b, 28, a[16], "total_chunk_msg_size", INT32_MIN, INT32_MAX)) return -1;
    if (a[17] != Py_None && put_signed_field(b, 29, a[17], "chunk_id", INT32_MIN, INT32_MAX)) return -1;
    return 0;
}

static PyObject *finish(outbuf *b, int rc) {
    PyObject *result = rc ? NULL : PyBytes_FromStringAndSize((const char *)b->p, (Py_ssize_t)b->len);
    PyMem_Free(b->p);
    return result;
}

static PyObject *encode_metadata(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 18) {
        PyErr_Format(PyExc_TypeError, "encode_metadata takes 18 arguments (%zd given)", nargs);
        return NULL;
    }
    outbuf b = {0};
    return finish(&b, put_metadata(&b, args));
}

/* ------------------------------------------------------------------------ encode_single_metadata -- */

PyDoc_STRVAR(encode_single_metadata_doc,
"encode_single_metadata(payload_size, sequence_id, properties, partition_key, event_time, ordering_key)\n"
"-> bytes\n\n"
"A serialized SingleMessageMetadata of a batch item (fields 1, 2, 3, 5, 7, 8), byte-identical to protobuf's\n"
"output; sequence_id is always written (as the C++ producer).");

static int put_single(outbuf *b, PyObject *payload_size, PyObject *sequence_id, PyObject *properties,
                      PyObject *partition_key, PyObject *event_time, PyObject *ordering_key) {
    long long size;
    uint64_t sid;
    if (qs_arg_signed(payload_size, "payload_size", INT32_MIN, INT32_MAX, &size)) return -1;
    if (qs_arg_unsigned(sequence_id, "sequence_id", UINT64_MAX, &sid)) return -1;
    if (properties != Py_None && put_properties(b, 1, properties)) return -1;
    if (partition_key != Py_None && put_str_field(b, 2, partition_key, "partition_key")) return -1;
    if (ob_tag(b, 3, 0) || ob_varint(b, (uint64_t)size)) return -1;
    if (event_time != Py_None && put_unsigned_field(b, 5, event_time, "event_time", UINT64_MAX)) return -1;
    if (ordering_key != Py_None) {
        const char *data;
        Py_ssize_t len;
        if (get_bytes(ordering_key, "ordering_key", &data, &len) || ob_delimited(b, 7, data, (size_t)len)) return -1;
    }
    return ob_tag(b, 8, 0) || ob_varint(b, sid) ? -1 : 0;
}

static PyObject *encode_single_metadata(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "encode_single_metadata takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    outbuf b = {0};
    return finish(&b, put_single(&b, args[0], args[1], args[2], args[3], args[4], args[5]));
}

/* ----------------------------------------------------------------------------------- encode_send -- */

PyDoc_STRVAR(encode_send_doc,
"encode_send(producer_id, sequence_id, num_messages, highest_sequence_id, is_chunk, metadata, payload)\n"
"-> bytes\n\n"
"A whole SEND frame: [totalSize u32][commandSize u32][BaseCommand{type SEND, send{producer_id,\n"
"sequence_id, num_messages?, highest_sequence_id?, is_chunk?}}][0x0e01][crc32c u32][metadataSize u32]\n"
"[metadata][payload] (C++ Commands::newSend); payload: any C-contiguous bytes-like object (BufferError\n"
"otherwise). The CRC-32C covers [metadataSize][metadata][payload] and runs\n"
"without the GIL for large payloads. num_messages (int32) and highest_sequence_id (uint64) None: left out.\n"
"Raises TypeError / ValueError (bad argument, a frame over 4 GiB).");

static PyObject *encode_send(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "encode_send takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    uint8_t cmd[64];
    size_t body = 0;
    uint8_t inner[60];
    uint64_t producer_id, sequence_id, highest = 0;
    long long num = 0;
    if (qs_arg_unsigned(args[0], "producer_id", UINT64_MAX, &producer_id)) return NULL;
    if (qs_arg_unsigned(args[1], "sequence_id", UINT64_MAX, &sequence_id)) return NULL;
    if (args[2] != Py_None && qs_arg_signed(args[2], "num_messages", INT32_MIN, INT32_MAX, &num)) return NULL;
    if (args[3] != Py_None && qs_arg_unsigned(args[3], "highest_sequence_id", UINT64_MAX, &highest)) return NULL;
    int is_chunk = PyObject_IsTrue(args[4]);
    if (is_chunk < 0) return NULL;
    const char *metadata, *payload;
    Py_ssize_t metadata_len, payload_len;
    if (get_bytes(args[5], "metadata", &metadata, &metadata_len)) return NULL;
    Py_buffer view;
    if (!PyObject_CheckBuffer(args[6])) {
        PyErr_Format(PyExc_TypeError, "payload must be bytes-like, got %.100s", Py_TYPE(args[6])->tp_name);
        return NULL;
    }
    if (PyObject_GetBuffer(args[6], &view, PyBUF_SIMPLE)) return NULL; /* BufferError: not contiguous */
    payload = view.buf;
    payload_len = view.len;
    PyObject *frame = NULL;

    outbuf in = {inner, 0, sizeof inner}; /* at most 11 + 11 + 11 + 11 + 2 bytes: never reallocates */
    ob_varint(&in, 0x08);
    ob_varint(&in, producer_id);
    ob_varint(&in, 0x10);
    ob_varint(&in, sequence_id);
    if (args[2] != Py_None) {
        ob_varint(&in, 0x18);
        ob_varint(&in, (uint64_t)num);
    }
    if (args[3] != Py_None) {
        ob_varint(&in, 0x30);
        ob_varint(&in, highest);
    }
    if (is_chunk) {
        ob_varint(&in, 0x38);
        ob_varint(&in, 1);
    }
    outbuf c = {cmd, 0, sizeof cmd};
    ob_varint(&c, 0x08);
    ob_varint(&c, 6);
    ob_varint(&c, 0x32);
    ob_varint(&c, in.len);
    ob_put(&c, inner, in.len);
    body = c.len;

    unsigned long long total = 4ull + body + 10ull + (unsigned long long)metadata_len + (unsigned long long)payload_len;
    if (total > U32_MAX_) {
        PyErr_Format(PyExc_ValueError, "frame of %llu bytes does not fit the u32 totalSize field", total);
        goto done;
    }
    frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total + 4));
    if (!frame) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(frame);
    qs_put_be32(p, (uint32_t)total);
    qs_put_be32(p + 4, (uint32_t)body);
    memcpy(p + 8, cmd, body);
    uint8_t *q = p + 8 + body;
    q[0] = 0x0e;
    q[1] = 0x01;
    uint8_t *span = q + 6;
    qs_put_be32(span, (uint32_t)metadata_len);
    memcpy(span + 4, metadata, (size_t)metadata_len);
    size_t span_len = 4 + (size_t)metadata_len + (size_t)payload_len;
    uint32_t crc;
    if (payload_len >= GIL_FREE_CRC_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        memcpy(span + 4 + metadata_len, payload, (size_t)payload_len);
        crc = qs_crc32c(0, span, span_len);
        Py_END_ALLOW_THREADS
    } else {
        memcpy(span + 4 + metadata_len, payload, (size_t)payload_len);
        crc = qs_crc32c(0, span, span_len);
    }
    qs_put_be32(q + 2, crc);
done:
    PyBuffer_Release(&view);
    return frame;
}

/* ------------------------------------------------------------------------------------ encode_ack -- */

PyDoc_STRVAR(encode_ack_doc,
"encode_ack(consumer_id, ack_type, entries) -> bytes\n\n"
"A whole ACK frame (BaseCommand{type ACK, ack{consumer_id, ack_type, message_id{ledgerId, entryId} per\n"
"entry}}), byte-identical to commands.new_ack(consumer_id, entries, ack_type). entries: a list of\n"
"(ledger_id, entry_id) tuples of int64 or uint64. Raises TypeError / ValueError.");

static PyObject *encode_ack(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "encode_ack takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    uint64_t consumer_id;
    long long ack_type;
    if (qs_arg_unsigned(args[0], "consumer_id", UINT64_MAX, &consumer_id)) return NULL;
    if (qs_arg_signed(args[1], "ack_type", 0, 1, &ack_type)) return NULL;
    PyObject *entries = args[2];
    if (!PyList_Check(entries)) {
        PyErr_Format(PyExc_TypeError, "entries must be a list, got %.100s", Py_TYPE(entries)->tp_name);
        return NULL;
    }
    outbuf body = {0};
    if (ob_tag(&body, 1, 0) || ob_varint(&body, consumer_id) || ob_tag(&body, 2, 0) ||
        ob_varint(&body, (uint64_t)ack_type))
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *item = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "each entry must be a (ledger_id, entry_id) tuple");
            goto done;
        }
        uint64_t ledger, entry;
        if (qs_arg_id(PyTuple_GET_ITEM(item, 0), "ledger_id", &ledger) ||
            qs_arg_id(PyTuple_GET_ITEM(item, 1), "entry_id", &entry))
            goto done;
        size_t len = 2 + qs_pb_varint_size(ledger) + qs_pb_varint_size(entry);
        if (ob_tag(&body, 3, 2) || ob_varint(&body, len) || ob_tag(&body, 1, 0) || ob_varint(&body, ledger) ||
            ob_tag(&body, 2, 0) || ob_varint(&body, entry))
            goto done;
    }
    size_t command = 1 + 1 + 1 + qs_pb_varint_size(body.len) + body.len;
    if (command + 4 > U32_MAX_) {
        PyErr_SetString(PyExc_ValueError, "ACK frame does not fit the u32 totalSize field");
        goto done;
    }
    outbuf frame = {0};
    uint8_t head[8];
    qs_put_be32(head, (uint32_t)(command + 4));
    qs_put_be32(head + 4, (uint32_t)command);
    if (ob_put(&frame, head, 8) || ob_varint(&frame, 0x08) || ob_varint(&frame, 10) || ob_varint(&frame, 0x52) ||
        ob_varint(&frame, body.len) || ob_put(&frame, body.p, body.len)) {
        PyMem_Free(frame.p);
        goto done;
    }
    PyMem_Free(body.p);
    return finish(&frame, 0);
done:
    PyMem_Free(body.p);
    return NULL;
}

/* ------------------------------------------------------------------------------- BatchContainer -- */

typedef struct {
    PyObject_HEAD
    PyObject *buffer; /* a private bytes object used as a growing buffer (NULL before the first item); its
                         first `used` bytes are the open batch; kept between batches */
    Py_ssize_t used;
    PyObject *waiters; /* list */
    PyObject *first;   /* first item given to add(), or NULL */
    PyObject *sequence_id, *highest_sequence_id; /* ints: first and last item's, -1 when empty */
    long long num_messages, current_bytes;
    long long max_messages, max_bytes, max_message_size, size_limit;
} BatchContainer;

static int bc_reset(BatchContainer *self) {
    PyObject *waiters = PyList_New(0);
    if (!waiters) return -1;
    Py_CLEAR(self->first); /* the buffer is kept (its capacity is reused), `used` restarts at 0 */
    Py_XSETREF(self->waiters, waiters);
    self->used = 0;
    PyObject *none_yet = PyLong_FromLong(-1);
    if (!none_yet) return -1;
    Py_INCREF(none_yet);
    Py_XSETREF(self->sequence_id, none_yet);
    Py_XSETREF(self->highest_sequence_id, none_yet);
    self->num_messages = 0;
    self->current_bytes = 0;
    return 0;
}

static int bc_init(BatchContainer *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"max_messages", "max_bytes", "max_message_size", NULL};
    PyObject *a, *b, *c;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:BatchContainer", names, &a, &b, &c)) return -1;
    if (qs_arg_signed(a, "max_messages", INT64_MIN, INT64_MAX, &self->max_messages) ||
        qs_arg_signed(b, "max_bytes", INT64_MIN, INT64_MAX, &self->max_bytes) ||
        qs_arg_signed(c, "max_message_size", INT64_MIN, INT64_MAX, &self->max_message_size))
        return -1;
    self->size_limit = self->max_bytes <= 0 ? self->max_message_size : self->max_bytes;
    return bc_reset(self);
}

static int bc_traverse(BatchContainer *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->waiters);
    Py_VISIT(self->first);
    return 0;
}

static int bc_clear(BatchContainer *self) {
    Py_CLEAR(self->buffer);
    Py_CLEAR(self->waiters);
    Py_CLEAR(self->first);
    Py_CLEAR(self->sequence_id);
    Py_CLEAR(self->highest_sequence_id);
    return 0;
}

static void bc_dealloc(BatchContainer *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    bc_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Room for `more` bytes past `used` in the buffer (doubling). */
static int bc_reserve(BatchContainer *self, size_t more) {
    Py_ssize_t cap = self->buffer ? PyBytes_GET_SIZE(self->buffer) : 0;
    if ((size_t)(PY_SSIZE_T_MAX - self->used) < more) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = self->used + (Py_ssize_t)more;
    if (need <= cap) return 0;
    Py_ssize_t grown = cap < 4096 ? 4096 : cap;
    while (grown < need) grown = grown > PY_SSIZE_T_MAX / 2 ? need : grown * 2;
    PyObject *bigger = PyBytes_FromStringAndSize(NULL, grown); /* the old buffer stays intact on failure */
    if (!bigger) return -1;
    if (self->used) memcpy(PyBytes_AS_STRING(bigger), PyBytes_AS_STRING(self->buffer), (size_t)self->used);
    Py_XSETREF(self->buffer, bigger);
    return 0;
}

/* Append [u32 len(single)][single][payload] and the waiter; returns 1 when full, 0 if not, -1 on error. */
static int bc_append(BatchContainer *self, const uint8_t *single, size_t single_len, const char *payload,
                     Py_ssize_t payload_len, PyObject *sequence_id, PyObject *waiter, PyObject *first) {
    if (bc_reserve(self, 4 + single_len + (size_t)payload_len)) return -1;
    if (PyList_Append(self->waiters, waiter)) return -1;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(self->buffer) + self->used;
    qs_put_be32(p, (uint32_t)single_len);
    memcpy(p + 4, single, single_len);
    memcpy(p + 4 + single_len, payload, (size_t)payload_len);
    self->used += 4 + (Py_ssize_t)single_len + payload_len;
    if (self->num_messages == 0) {
        Py_XINCREF(first);
        Py_XSETREF(self->first, first);
        Py_INCREF(sequence_id);
        Py_XSETREF(self->sequence_id, sequence_id);
    }
    Py_INCREF(sequence_id);
    Py_XSETREF(self->highest_sequence_id, sequence_id);
    self->num_messages += 1;
    self->current_bytes += payload_len;
    return (self->max_messages > 0 && self->num_messages >= self->max_messages) ||
           (self->max_bytes > 0 && self->current_bytes >= self->max_bytes);
}

/* A container made without __init__ (object.__new__ or __new__ alone) holds no list: refused, not crashed. */
static PyObject *not_initialized(void) {
    PyErr_SetString(PyExc_ValueError, "BatchContainer.__init__ was not called");
    return NULL;
}

static PyObject *bc_add_plain(BatchContainer *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!self->waiters) return not_initialized();
    PyObject *force_arg = nargs == 4 ? args[3] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nkw == 1 && nargs == 3 && PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) &&
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "force") == 0) {
        force_arg = args[3];
    } else if (nkw || nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "add_plain(payload, sequence_id, waiter, force=False)");
        return NULL;
    }
    const char *payload;
    Py_ssize_t size;
    uint64_t sid;
    if (get_bytes(args[0], "payload", &payload, &size)) return NULL;
    if (size > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "payload_size %zd is out of range [%d, %d]", size, INT32_MIN, INT32_MAX);
        return NULL;
    }
    if (qs_arg_unsigned(args[1], "sequence_id", UINT64_MAX, &sid)) return NULL;
    int force = 0;
    if (force_arg && (force = PyObject_IsTrue(force_arg)) < 0) return NULL;
    long long count = self->num_messages;
    if (count && !force &&
        (self->current_bytes + size > self->size_limit || (self->max_messages > 0 && self->max_messages <= count)))
        Py_RETURN_NONE;
    uint8_t single[32];
    outbuf s = {single, 0, sizeof single}; /* 1 + 5 + 1 + 10 bytes at most: never reallocates */
    ob_varint(&s, 0x18);
    ob_varint(&s, (uint64_t)size);
    ob_varint(&s, 0x40);
    ob_varint(&s, sid);
    int full = bc_append(self, single, s.len, payload, size, args[1], args[2], NULL);
    if (full < 0) return NULL;
    return PyBool_FromLong(full);
}

static PyObject *bc_add(BatchContainer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->waiters) return not_initialized();
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "add takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    static const char *const attrs[] = {"payload", "properties", "partition_key", "event_timestamp", "ordering_key"};
    PyObject *values[5] = {NULL};
    PyObject *result = NULL;
    outbuf b = {0};
    const char *payload;
    Py_ssize_t size;
    uint64_t sid;
    values[0] = PyObject_GetAttrString(args[0], attrs[0]);
    if (!values[0] || get_bytes(values[0], "payload", &payload, &size)) goto out;
    for (int i = 1; i < 5; i++) {
        values[i] = PyObject_GetAttrString(args[0], attrs[i]);
        if (!values[i]) goto out;
    }
    PyObject *size_obj = PyLong_FromSsize_t(size);
    if (!size_obj) goto out;
    int rc = put_single(&b, size_obj, args[1], values[1], values[2], values[3], values[4]);
    Py_DECREF(size_obj);
    if (rc || qs_arg_unsigned(args[1], "sequence_id", UINT64_MAX, &sid)) goto out;
    int full = bc_append(self, b.p, b.len, payload, size, args[1], args[2], args[0]);
    if (full >= 0) result = PyBool_FromLong(full);
out:
    PyMem_Free(b.p);
    for (int i = 0; i < 5; i++) Py_XDECREF(values[i]);
    return result;
}

static PyObject *bc_has_enough_space(BatchContainer *self, PyObject *arg) {
    long long size;
    if (qs_arg_signed(arg, "size", INT64_MIN / 4, INT64_MAX / 4, &size)) return NULL;
    int ok = size + self->current_bytes <= self->size_limit &&
             (self->max_messages <= 0 || self->num_messages < self->max_messages);
    return PyBool_FromLong(ok);
}

static PyObject *bc_take(BatchContainer *self, PyObject *unused) {
    if (!self->waiters) return not_initialized();
    if (self->num_messages == 0) {
        PyErr_SetString(PyExc_ValueError, "cannot build an empty batch");
        return NULL;
    }
    /* a copy: the buffer keeps its capacity for the next batch */
    PyObject *payload = PyBytes_FromStringAndSize(PyBytes_AS_STRING(self->buffer), self->used);
    if (!payload) return NULL;
    PyObject *result = Py_BuildValue("(NLOOOO)", payload, self->num_messages, self->sequence_id,
                                     self->highest_sequence_id, self->waiters, self->first ? self->first : Py_None);
    if (!result) return NULL;
    if (bc_reset(self)) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *bc_discard(BatchContainer *self, PyObject *unused) {
    if (!self->waiters) return not_initialized();
    PyObject *waiters = self->waiters;
    Py_INCREF(waiters);
    if (bc_reset(self)) {
        Py_DECREF(waiters);
        return NULL;
    }
    return waiters;
}

static PyObject *bc_is_empty(BatchContainer *self, void *closure) { return PyBool_FromLong(self->num_messages == 0); }

static PyMethodDef bc_methods[] = {
    {"add_plain", (PyCFunction)(void (*)(void))bc_add_plain, METH_FASTCALL | METH_KEYWORDS,
     "add_plain(payload, sequence_id, waiter, force=False) -> None | bool: see _codec_py.BatchContainer."},
    {"add", (PyCFunction)(void (*)(void))bc_add, METH_FASTCALL,
     "add(message, sequence_id, waiter) -> bool: see _codec_py.BatchContainer."},
    {"has_enough_space", (PyCFunction)bc_has_enough_space, METH_O, "The room rule for `size` payload bytes."},
    {"take", (PyCFunction)bc_take, METH_NOARGS,
     "take() -> (payload, num_messages, sequence_id, highest_sequence_id, waiters, first); empties it."},
    {"discard", (PyCFunction)bc_discard, METH_NOARGS, "Empty the container; returns the dropped waiters."},
    {NULL},
};

static PyMemberDef bc_members[] = {
    {"num_messages", T_LONGLONG, offsetof(BatchContainer, num_messages), READONLY, "items in the batch"},
    {"current_bytes", T_LONGLONG, offsetof(BatchContainer, current_bytes), READONLY, "payload bytes"},
    {"sequence_id", T_OBJECT, offsetof(BatchContainer, sequence_id), READONLY, "first item's, -1 if empty"},
    {"highest_sequence_id", T_OBJECT, offsetof(BatchContainer, highest_sequence_id), READONLY,
     "last item's, -1 if empty"},
    {"max_messages", T_LONGLONG, offsetof(BatchContainer, max_messages), READONLY, "<= 0: unlimited"},
    {"max_bytes", T_LONGLONG, offsetof(BatchContainer, max_bytes), READONLY, "<= 0: max_message_size only"},
    {"max_message_size", T_LONGLONG, offsetof(BatchContainer, max_message_size), READONLY, "bytes"},
    {"size_limit", T_LONGLONG, offsetof(BatchContainer, size_limit), READONLY, "payload bytes a batch may hold"},
    {NULL},
};

static PyGetSetDef bc_getset[] = {
    {"is_empty", (getter)bc_is_empty, NULL, "True when no message is waiting.", NULL},
    {NULL},
};

static PyType_Slot bc_slots[] = {
    {Py_tp_doc, "BatchContainer(max_messages, max_bytes, max_message_size): the producer's open batch; see\n"
                "quasar.client._codec_py.BatchContainer."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, bc_init},
    {Py_tp_dealloc, bc_dealloc},
    {Py_tp_traverse, bc_traverse},
    {Py_tp_clear, bc_clear},
    {Py_tp_methods, bc_methods},
    {Py_tp_members, bc_members},
    {Py_tp_getset, bc_getset},
    {0, NULL},
};

static PyType_Spec bc_spec = {
    "quasar.client._codec_c.BatchContainer",
    sizeof(BatchContainer),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    bc_slots,
};

/* ---------------------------------------------------------------------------------------- module -- */

static PyMethodDef methods[] = {
    {"encode_metadata", (PyCFunction)(void (*)(void))encode_metadata, METH_FASTCALL, encode_metadata_doc},
    {"encode_single_metadata", (PyCFunction)(void (*)(void))encode_single_metadata, METH_FASTCALL,
     encode_single_metadata_doc},
    {"encode_send", (PyCFunction)(void (*)(void))encode_send, METH_FASTCALL, encode_send_doc},
    {"encode_ack", (PyCFunction)(void (*)(void))encode_ack, METH_FASTCALL, encode_ack_doc},
    {NULL},
};

static int exec_module(PyObject *module) {
    qs_crc32c_init();
    PyObject *type = PyType_FromModuleAndSpec(module, &bc_spec, NULL);
    if (!type) return -1;
    int rc = PyModule_AddObjectRef(module, "BatchContainer", type);
    Py_DECREF(type);
    return rc;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "quasar.client._codec_c",
    "The client's per-message codec, compiled: twin of quasar.client._codec_py (see its docstring).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__codec_c(void) { return PyModuleDef_Init(&module_def); }
