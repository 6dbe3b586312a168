/* quasar.client._incoming_c: the client's receive fast path, compiled (DESIGN.md "Compiled hot paths").
 *
 *   read_frames(3 args) -> (events, end)       SEND_RECEIPT / MESSAGE frames decoded, the rest raw
 *   split_batch(7 args) -> (messages, skipped) a received batch cut into Message objects
 *   complete_receipt(8 args) -> None           a receipt's message ids handed to the waiters
 *
 * Twin of quasar/client/_incoming_py.py: same API, same results, same exception classes; its docstring is the
 * specification. read_frames(buffer, start, max_frame_size) -> (events, end) cuts the complete
 * frames of a received buffer and decodes SEND_RECEIPT and MESSAGE (the commands that arrive once per message)
 * without protobuf objects for the command; it is conservative: anything but the fields it knows, each once with
 * its wire type, and every malformed frame go back whole as raw events (0, start, end) for the protocol's
 * FrameDecoder, which decodes them or raises its protocol error. Every read is bounds-checked (qs_pb.h), UTF-8
 * is checked strictly (qs_utf8.h), the CRC-32C (qs_crc32c.h) of a large payload runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "qs_crc32c.h"
#include "qs_pb.h"
#include "qs_pyargs.h"
#include "qs_utf8.h"

#define RECEIPT 7
#define MESSAGE 9
#define GIL_FREE_CRC_BYTES (256 * 1024)
#define MAX_FIELD 31 /* field numbers tracked in `seen` masks */

/* One field of a message: number, wire type (0 or 2), the varint value or the bytes [data, data+len). */
typedef struct {
    uint32_t field, wire;
    uint64_t value;
    const uint8_t *data;
    size_t len;
} field_t;

/* Next field of cursor `c`: 1 with *f filled, 0 at the end, -1 when malformed or a wire type other than 0/2. */
static int next_field(qs_pb_cursor *c, field_t *f) {
    if (c->p >= c->end) return 0;
    if (qs_pb_tag(c, &f->field, &f->wire)) return -1;
    if (f->wire == 0) return qs_pb_varint(c, &f->value) ? -1 : 1;
    if (f->wire == 2) return qs_pb_bytes(c, &f->data, &f->len) ? -1 : 1;
    return -1;
}

/* MessageIdData holding only varints 1, 2 (required), 3, 4, 6, each once: 0 and the ids, or -1. */
static int message_id(const uint8_t *p, size_t len, int64_t *ledger, int64_t *entry) {
    qs_pb_cursor c = {p, p + len};
    field_t f;
    uint32_t seen = 0;
    int rc;
    while ((rc = next_field(&c, &f)) == 1) {
        if (f.wire != 0 || !(f.field <= 4 || f.field == 6) || (seen & (1u << f.field))) return -1;
        seen |= 1u << f.field;
        if (f.field == 1) *ledger = (int64_t)f.value;
        if (f.field == 2) *entry = (int64_t)f.value;
    }
    return rc < 0 || (seen & 6u) != 6u ? -1 : 0;
}

/* MessageMetadata kinds by field number: 0 not accepted, else wire type + 1 in the low bits and a kind. */
enum { K_NO = 0, K_ONCE, K_STR, K_STRS, K_KV, K_ENUM };
static const struct {
    int wire;
    int kind;
} METADATA[MAX_FIELD] = {
    [1] = {2, K_STR},   [2] = {0, K_ONCE},  [3] = {0, K_ONCE},  [4] = {2, K_KV},    [5] = {2, K_STR},
    [6] = {2, K_STR},   [7] = {2, K_STRS},  [8] = {0, K_ENUM},  [9] = {0, K_ONCE},  [11] = {0, K_ONCE},
    [12] = {0, K_ONCE}, [16] = {2, K_ONCE}, [17] = {0, K_ONCE}, [18] = {2, K_ONCE}, [19] = {0, K_ONCE},
    [20] = {0, K_ONCE}, [22] = {0, K_ONCE}, [23] = {0, K_ONCE}, [24] = {0, K_ONCE}, [25] = {0, K_ONCE},
    [26] = {2, K_STR},  [27] = {0, K_ONCE}, [28] = {0, K_ONCE}, [29] = {0, K_ONCE}, [30] = {0, K_ONCE},
};

/* A KeyValue holding exactly key 1 and value 2, each once, both valid UTF-8: 0, else -1. */
static int key_value(const uint8_t *p, size_t len) {
    qs_pb_cursor c = {p, p + len};
    field_t f;
    uint32_t seen = 0;
    int rc;
    while ((rc = next_field(&c, &f)) == 1) {
        if (f.wire != 2 || (f.field != 1 && f.field != 2) || (seen & (1u << f.field))) return -1;
        if (!qs_utf8_valid(f.data, f.len)) return -1;
        seen |= 1u << f.field;
    }
    return rc < 0 || seen != 6u ? -1 : 0;
}

/* The routing fields of a MessageMetadata, as protobuf reads them (see the twin's docstring). */
typedef struct {
    int has_batch;
    int32_t batch, chunks;
    uint32_t compression, uncompressed;
} routing_t;

/* The checks of the module docstring on a MessageMetadata: 0 (and *r filled) when it is for the fast path,
 * else -1. */
static int check_metadata(const uint8_t *p, size_t len, routing_t *r) {
    qs_pb_cursor c = {p, p + len};
    field_t f;
    uint32_t seen = 0;
    int rc;
    while ((rc = next_field(&c, &f)) == 1) {
        if (f.field >= MAX_FIELD || METADATA[f.field].kind == K_NO || (int)f.wire != METADATA[f.field].wire)
            return -1;
        int kind = METADATA[f.field].kind;
        if (kind == K_ONCE || kind == K_STR || kind == K_ENUM) {
            if (seen & (1u << f.field)) return -1;
            seen |= 1u << f.field;
        }
        if ((kind == K_STR || kind == K_STRS) && !qs_utf8_valid(f.data, f.len)) return -1;
        if (kind == K_KV && key_value(f.data, f.len)) return -1;
        if (kind == K_ENUM && f.value > 4) return -1;
        if (f.field == 8) r->compression = (uint32_t)f.value;
        if (f.field == 9) r->uncompressed = (uint32_t)f.value;
        if (f.field == 11) {
            r->has_batch = 1;
            r->batch = (int32_t)(uint32_t)f.value;
        }
        if (f.field == 27) r->chunks = (int32_t)(uint32_t)f.value;
    }
    return rc < 0 || (seen & 0xEu) != 0xEu ? -1 : 0;
}

/* The event of the frame [p, p+size) (its length prefix included), a new reference; Py_None (a new reference)
 * when it goes raw; NULL with an exception when an allocation fails. */
static PyObject *decode_frame(const uint8_t *p, size_t size) {
    const uint8_t *frame_end = p + size;
    uint32_t command_size = qs_be32(p + 4);
    if (command_size > size - 8) Py_RETURN_NONE;
    const uint8_t *command_end = p + 8 + command_size;

    /* BaseCommand: type (1) and its sub-message, nothing else */
    qs_pb_cursor c = {p + 8, command_end};
    field_t f;
    uint64_t type = 0;
    const uint8_t *body = NULL;
    size_t body_len = 0;
    uint32_t body_field = 0, seen = 0;
    int rc;
    while ((rc = next_field(&c, &f)) == 1) {
        if (seen & (1u << (f.field & 31)) || !(f.field == 1 || f.field == RECEIPT || f.field == MESSAGE))
            Py_RETURN_NONE;
        seen |= 1u << f.field;
        if (f.field == 1) {
            if (f.wire != 0) Py_RETURN_NONE;
            type = f.value;
        } else {
            if (f.wire != 2) Py_RETURN_NONE;
            body = f.data;
            body_len = f.len;
            body_field = f.field;
        }
    }
    if (rc < 0 || !(seen & 2u) || !body || type != body_field) Py_RETURN_NONE;

    /* the sub-message's fields: [1..5] varints or the message id bytes */
    uint64_t values[6] = {0};
    const uint8_t *id_data = NULL;
    size_t id_len = 0;
    uint32_t id_field = type == RECEIPT ? 3 : 2;
    uint32_t allowed = type == RECEIPT ? 0x1Eu : 0x2Eu; /* receipt 1-4, message 1, 2, 3, 5 */
    seen = 0;
    c.p = body;
    c.end = body + body_len;
    while ((rc = next_field(&c, &f)) == 1) {
        if (f.field > 5 || !(allowed & (1u << f.field)) || (seen & (1u << f.field))) Py_RETURN_NONE;
        if ((f.field == id_field) != (f.wire == 2)) Py_RETURN_NONE;
        seen |= 1u << f.field;
        if (f.field == id_field) {
            id_data = f.data;
            id_len = f.len;
        } else {
            values[f.field] = f.value;
        }
    }
    uint32_t required = type == RECEIPT ? 0xEu : 0x6u;
    if (rc < 0 || (seen & required) != required) Py_RETURN_NONE;
    int64_t ledger = 0, entry = 0;
    if (message_id(id_data, id_len, &ledger, &entry)) Py_RETURN_NONE;

    if (type == RECEIPT) {
        if (command_end != frame_end) Py_RETURN_NONE;
        return Py_BuildValue("(iKKLL)", RECEIPT, (unsigned long long)values[1], (unsigned long long)values[2],
                             (long long)ledger, (long long)entry);
    }

    /* MESSAGE: [0x0e01 crc]? [metadataSize][metadata][payload] */
    const uint8_t *q = command_end;
    if (frame_end - q >= 2 && qs_be16(q) == 0x0E02) Py_RETURN_NONE;
    PyObject *checksum_ok = Py_None;
    if (frame_end - q >= 2 && qs_be16(q) == 0x0E01) {
        if (frame_end - q < 6) Py_RETURN_NONE;
        uint32_t stored = qs_be32(q + 2), crc;
        q += 6;
        size_t n = (size_t)(frame_end - q);
        if (n >= GIL_FREE_CRC_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            crc = qs_crc32c(0, q, n);
            Py_END_ALLOW_THREADS
        } else {
            crc = qs_crc32c(0, q, n);
        }
        checksum_ok = crc == stored ? Py_True : Py_False;
    }
    if (frame_end - q < 4) Py_RETURN_NONE;
    uint32_t metadata_size = qs_be32(q);
    const uint8_t *metadata = q + 4;
    if (metadata_size > (size_t)(frame_end - metadata)) Py_RETURN_NONE;
    routing_t r = {0};
    if (check_metadata(metadata, metadata_size, &r)) Py_RETURN_NONE;
    const uint8_t *payload = metadata + metadata_size;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)metadata, (Py_ssize_t)metadata_size);
    if (!raw) return NULL;
    PyObject *data = PyBytes_FromStringAndSize((const char *)payload, (Py_ssize_t)(frame_end - payload));
    if (!data) {
        Py_DECREF(raw);
        return NULL;
    }
    PyObject *batch = r.has_batch ? PyLong_FromLong(r.batch) : (Py_INCREF(Py_None), Py_None);
    if (!batch) {
        Py_DECREF(raw);
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("(iKLLkONNNikk)", MESSAGE, (unsigned long long)values[1], (long long)ledger,
                         (long long)entry, (unsigned long)(values[3] & 0xFFFFFFFFu), checksum_ok, raw, data, batch,
                         (int)r.chunks, (unsigned long)r.compression, (unsigned long)r.uncompressed);
}

static PyObject *raw_event(size_t start, size_t end) { return Py_BuildValue("(inn)", 0, (Py_ssize_t)start, (Py_ssize_t)end); }

PyDoc_STRVAR(read_frames_doc,
"read_frames(buffer, start, max_frame_size) -> (events, end)\n\n"
"Decode the complete frames of buffer[start:]: SEND_RECEIPT -> (7, producer_id, sequence_id, ledger_id,\n"
"entry_id); MESSAGE -> (9, consumer_id, ledger_id, entry_id, redelivery_count, checksum_ok, metadata bytes,\n"
"payload bytes, num_messages_in_batch or None, num_chunks_from_msg, compression, uncompressed_size);\n"
"anything else, or not for the fast path -> (0, start, end), a whole frame for the FrameDecoder (the rest of\n"
"the buffer when a length prefix is refused). buffer[end:] is an incomplete frame. Raises TypeError /\n"
"ValueError / BufferError on bad arguments. See quasar.client._incoming_py.");

static PyObject *read_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "read_frames takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyLong_Check(args[1]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "start and max_frame_size must be ints");
        return NULL;
    }
    if (!PyObject_CheckBuffer(args[0])) {
        PyErr_Format(PyExc_TypeError, "buffer must be bytes-like, got %.100s", Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE)) return NULL;
    PyObject *events = NULL, *result = NULL;
    int overflow = 0;
    long long start = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (start == -1 && PyErr_Occurred()) goto done;
    if (overflow || start < 0 || start > (long long)view.len) {
        PyErr_Format(PyExc_ValueError, "start %R is outside the %zd-byte buffer", args[1], view.len);
        goto done;
    }
    long long max_frame = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (max_frame == -1 && PyErr_Occurred()) goto done;
    if (overflow || max_frame < 0) {
        PyErr_Format(PyExc_ValueError, "max_frame_size %R is out of range", args[2]);
        goto done;
    }
    events = PyList_New(0);
    if (!events) goto done;
    const uint8_t *base = view.buf;
    size_t size = (size_t)view.len, pos = (size_t)start;
    while (size - pos >= 4) {
        uint32_t total = qs_be32(base + pos);
        PyObject *event;
        size_t frame_end;
        if ((long long)total > max_frame || total < 4) {
            event = raw_event(pos, size);
            frame_end = size;
        } else {
            if (size - pos - 4 < total) break;
            frame_end = pos + 4 + total;
            event = decode_frame(base + pos, 4 + (size_t)total);
            if (event == Py_None) {
                Py_DECREF(event);
                event = raw_event(pos, frame_end);
            }
        }
        if (!event) goto done;
        int rc = PyList_Append(events, event);
        Py_DECREF(event);
        if (rc) goto done;
        pos = frame_end;
    }
    result = Py_BuildValue("(On)", events, (Py_ssize_t)pos);
done:
    Py_XDECREF(events);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------- argument checks -- */

static int get_bytes(PyObject *obj, const char *name, const char **data, Py_ssize_t *len) {
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    return 0;
}

/* ------------------------------------------------------------------------------ slots of classes -- */

/* Offsets of object slots `names` of `type` (member descriptors of `type` or a base, T_OBJECT_EX). */
static int slot_offsets(PyObject *type, const char *const *names, int n, Py_ssize_t *out) {
    if (!PyType_Check(type)) {
        PyErr_Format(PyExc_TypeError, "message type must be a class, got %.100s", Py_TYPE(type)->tp_name);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString(type, names[i]);
        if (!descr) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
        }
        int ok = descr && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                 PyType_IsSubtype((PyTypeObject *)type, ((PyDescrObject *)descr)->d_type);
        if (ok) out[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_XDECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%.100s has no slot '%s'", ((PyTypeObject *)type)->tp_name, names[i]);
            return -1;
        }
    }
    return 0;
}

/* object.__new__, whose checks (abstract classes, types whose layout is not object's: "object.__new__(X) is not
 * safe") the first instance of each call goes through; set by exec_module. */
static PyObject *object_new;

/* A new instance of `type` without __init__, or NULL: object.__new__(type) the first time (*checked is then
 * set), the same allocation without the repeated checks afterwards. */
static PyObject *new_instance(PyObject *type, int *checked) {
    if (!*checked) {
        *checked = 1;
        return PyObject_CallOneArg(object_new, type);
    }
    PyTypeObject *t = (PyTypeObject *)type;
    return t->tp_alloc(t, 0);
}

/* Store `value` (a new reference, stolen) in the slot at `offset`. */
static inline void set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    PyObject **slot = (PyObject **)((char *)obj + offset);
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* ---------------------------------------------------------------------------------- split_batch -- */

/* payload_size when `p[0:len]` holds only varint fields 3 (present) and 8, else -1. */
static long long plain_single(const uint8_t *p, size_t len) {
    qs_pb_cursor c = {p, p + len};
    long long size = -1;
    while (c.p < c.end) {
        uint8_t tag = *c.p++;
        if (tag != 0x18 && tag != 0x40) return -1;
        uint64_t value;
        if (qs_pb_varint(&c, &value)) return -1;
        if (tag == 0x18) size = (long long)(int32_t)(uint32_t)value;
    }
    return size < 0 ? -1 : size;
}

PyDoc_STRVAR(split_batch_doc,
"split_batch(payload, offset, count, keep, entry, message_type, parse) -> (messages, skipped)\n\n"
"Cut the batch payload[offset:] ([u32 size][SingleMessageMetadata][item] x count) into message_type objects\n"
"(slots _data, entry, batch_index, _single set without __init__); see quasar.client._codec_py.split_batch.\n"
"Raises TypeError / ValueError (malformed batch), or what parse / keep raise.");

static const char *const MESSAGE_SLOTS[] = {"_data", "entry", "batch_index", "_single"};

static PyObject *split_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "split_batch takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *payload = args[0], *keep = args[3], *entry = args[4], *type = args[5], *parse = args[6];
    const char *data;
    Py_ssize_t total;
    long long offset, count;
    if (get_bytes(payload, "payload", &data, &total)) return NULL;
    if (qs_arg_signed(args[1], "offset", 0, (long long)total, &offset)) return NULL;
    if (qs_arg_signed(args[2], "count", 0, INT64_MAX, &count)) return NULL;
    Py_ssize_t off[4];
    if (slot_offsets(type, MESSAGE_SLOTS, 4, off)) return NULL;
    const uint8_t *base = (const uint8_t *)data;
    size_t pos = (size_t)offset, end_all = (size_t)total;
    PyObject *messages = PyList_New(0);
    if (!messages) return NULL;
    long long skipped = 0;
    int checked = 0;
    for (long long index = 0; index < count; index++) {
        if (end_all - pos < 4) {
            PyErr_Format(PyExc_ValueError, "batch item %lld runs past the %zd-byte payload", index, total);
            goto fail;
        }
        size_t start = pos + 4;
        uint32_t meta_len = qs_be32(base + pos);
        if (meta_len > end_all - start) {
            PyErr_Format(PyExc_ValueError, "batch item %lld runs past the %zd-byte payload", index, total);
            goto fail;
        }
        size_t end = start + meta_len;
        long long size = plain_single(base + start, meta_len);
        PyObject *single = PyBytes_FromStringAndSize(data + start, (Py_ssize_t)meta_len);
        if (!single) goto fail;
        if (size < 0) {
            PyObject *parsed = PyObject_CallOneArg(parse, single);
            Py_DECREF(single);
            if (!parsed) goto fail;
            single = parsed;
            PyObject *value = PyObject_GetAttrString(parsed, "payload_size");
            if (!value) {
                Py_DECREF(single);
                goto fail;
            }
            int overflow = 0;
            size = PyLong_Check(value) ? PyLong_AsLongLongAndOverflow(value, &overflow) : -1;
            if (size == -1 && PyErr_Occurred()) PyErr_Clear();
            if (!PyLong_Check(value) || overflow || size < 0) {
                PyErr_Format(PyExc_ValueError, "batch item %lld has payload_size %R", index, value);
                Py_DECREF(value);
                Py_DECREF(single);
                goto fail;
            }
            Py_DECREF(value);
        }
        if ((unsigned long long)size > end_all - end) {
            Py_DECREF(single);
            PyErr_Format(PyExc_ValueError, "batch item %lld runs past the %zd-byte payload", index, total);
            goto fail;
        }
        pos = end + (size_t)size;
        int kept = 1;
        if (keep != Py_None) {
            PyObject *index_obj = PyLong_FromLongLong(index);
            PyObject *verdict = index_obj ? PyObject_CallOneArg(keep, index_obj) : NULL;
            Py_XDECREF(index_obj);
            kept = verdict ? PyObject_IsTrue(verdict) : -1;
            Py_XDECREF(verdict);
            if (kept < 0) {
                Py_DECREF(single);
                goto fail;
            }
        }
        if (!kept) {
            Py_DECREF(single);
            skipped++;
            continue;
        }
        PyObject *message = new_instance(type, &checked);
        PyObject *item = message ? PyBytes_FromStringAndSize(data + end, (Py_ssize_t)size) : NULL;
        PyObject *index_obj = item ? PyLong_FromLongLong(index) : NULL;
        if (!index_obj) {
            Py_XDECREF(item);
            Py_XDECREF(message);
            Py_DECREF(single);
            goto fail;
        }
        set_slot(message, off[0], item);
        Py_INCREF(entry);
        set_slot(message, off[1], entry);
        set_slot(message, off[2], index_obj);
        set_slot(message, off[3], single);
        int rc = PyList_Append(messages, message);
        Py_DECREF(message);
        if (rc) goto fail;
    }
    if (pos != end_all) {
        PyErr_Format(PyExc_ValueError, "%zu bytes left over after %lld batch items", end_all - pos, count);
        goto fail;
    }
    return Py_BuildValue("(NL)", messages, skipped);
fail:
    Py_DECREF(messages);
    return NULL;
}

/* ------------------------------------------------------------------------------ complete_receipt -- */

PyDoc_STRVAR(complete_receipt_doc,
"complete_receipt(waiters, ledger_id, entry_id, partition, size, message_id_type, future_type, fallback)\n\n"
"Hand waiter i of a receipted entry message_id_type(ledger_id, entry_id, partition, i, size) (batch index -1\n"
"and size 0 when size <= 0), built without __init__: a future of exactly future_type gets set_result unless\n"
"done(), None is skipped, anything else goes to fallback(waiter, id). See _incoming_py.complete_receipt.");

static const char *const ID_SLOTS[] = {"ledger_id", "entry_id", "partition", "batch_index", "batch_size"};

static PyObject *complete_receipt(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "complete_receipt takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *waiters = args[0], *type = args[5], *future_type = args[6], *fallback = args[7];
    if (!PyList_Check(waiters)) {
        PyErr_Format(PyExc_TypeError, "waiters must be a list, got %.100s", Py_TYPE(waiters)->tp_name);
        return NULL;
    }
    long long size;
    if (qs_arg_signed(args[4], "size", INT32_MIN, INT32_MAX, &size)) return NULL;
    Py_ssize_t off[5];
    if (slot_offsets(type, ID_SLOTS, 5, off)) return NULL;
    PyObject *snapshot = PyList_GetSlice(waiters, 0, PyList_GET_SIZE(waiters));
    if (!snapshot) return NULL;
    PyObject *size_obj = PyLong_FromLongLong(size > 0 ? size : 0);
    PyObject *minus_one = PyLong_FromLong(-1);
    PyObject *done_name = PyUnicode_InternFromString("done");
    PyObject *set_name = PyUnicode_InternFromString("set_result");
    PyObject *result = NULL;
    int checked = 0;
    if (!size_obj || !minus_one || !done_name || !set_name) goto out;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(snapshot); i++) {
        PyObject *waiter = PyList_GET_ITEM(snapshot, i);
        if (waiter == Py_None) continue;
        PyObject *mid = new_instance(type, &checked);
        if (!mid) goto out;
        PyObject *index = size > 0 ? PyLong_FromSsize_t(i) : (Py_INCREF(minus_one), minus_one);
        if (!index) {
            Py_DECREF(mid);
            goto out;
        }
        Py_INCREF(args[1]);
        set_slot(mid, off[0], args[1]);
        Py_INCREF(args[2]);
        set_slot(mid, off[1], args[2]);
        Py_INCREF(args[3]);
        set_slot(mid, off[2], args[3]);
        set_slot(mid, off[3], index);
        Py_INCREF(size_obj);
        set_slot(mid, off[4], size_obj);
        PyObject *r;
        if ((PyObject *)Py_TYPE(waiter) == future_type) {
            PyObject *done = PyObject_CallMethodNoArgs(waiter, done_name);
            int is_done = done ? PyObject_IsTrue(done) : -1;
            Py_XDECREF(done);
            if (is_done < 0) {
                Py_DECREF(mid);
                goto out;
            }
            r = is_done ? (Py_INCREF(Py_None), Py_None) : PyObject_CallMethodOneArg(waiter, set_name, mid);
        } else {
            PyObject *call[2] = {waiter, mid};
            r = PyObject_Vectorcall(fallback, call, 2, NULL);
        }
        Py_DECREF(mid);
        if (!r) goto out;
        Py_DECREF(r);
    }
    result = Py_None;
    Py_INCREF(result);
out:
    Py_DECREF(snapshot);
    Py_XDECREF(size_obj);
    Py_XDECREF(minus_one);
    Py_XDECREF(done_name);
    Py_XDECREF(set_name);
    return result;
}

static PyMethodDef methods[] = {
    {"read_frames", (PyCFunction)(void (*)(void))read_frames, METH_FASTCALL, read_frames_doc},
    {"split_batch", (PyCFunction)(void (*)(void))split_batch, METH_FASTCALL, split_batch_doc},
    {"complete_receipt", (PyCFunction)(void (*)(void))complete_receipt, METH_FASTCALL, complete_receipt_doc},
    {NULL},
};

static int exec_module(PyObject *module) {
    qs_crc32c_init();
    if (!object_new) object_new = PyObject_GetAttrString((PyObject *)&PyBaseObject_Type, "__new__");
    return object_new ? 0 : -1;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "quasar.client._incoming_c",
    "The client's receive fast path, compiled: twin of quasar.client._incoming_py (see its docstring).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__incoming_c(void) { return PyModuleDef_Init(&module_def); }
