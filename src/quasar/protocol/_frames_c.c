/* quasar.protocol._frames_c: the broker's SEND fast path, compiled (twin: _frames_py.py, same API).
 *
 * encode_send_receipt(...) writes a whole SEND_RECEIPT frame, byte for byte what the protobuf builder makes.
 *
 * parse_send(buffer, command_start, command_end, frame_end) reads one SEND frame straight from the
 * decoder's receive buffer: the BaseCommand and its CommandSend, the payload headers
 * ([0x0e01 crc32c]? [u32 metadataSize][MessageMetadata][payload], reference/pulsar-protocol.md), the
 * CRC-32C over [metadataSize .. frame end), and the MessageMetadata, which it validates as the generic
 * path does (required producer_name / sequence_id / publish_time, strings valid UTF-8, nested KeyValue
 * complete) without building any protobuf object.
 *
 * It returns (producer_id, sequence_id, highest_sequence_id, is_chunk, messages_in_entry, checksum_ok)
 * for a SEND it fully understands, and None ("decline") for anything else: another command type, a field
 * the fast path does not handle (transactions, markers, message_id, encryption keys, broker entry
 * metadata, unknown fields), a value outside its type's range, or any malformed byte. A declined frame
 * goes through the generic decoder (upb + checks), which answers or raises exactly as before, so the fast
 * path can never accept what the generic path would refuse. Every read is bounds-checked; no input can
 * crash it. The CRC of a span over 64 KiB runs with the GIL released.
 *
 * Pulsar source: Commands.java newSend / C++ Commands::newSend (frame layout), PulsarApi.proto (fields).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "qs_crc32c.h"
#include "qs_pb.h"
#include "qs_pyargs.h"
#include "qs_utf8.h"

#define SEND_TYPE 6
#define CRC_GIL_RELEASE_BYTES (64 * 1024)

typedef struct {
    uint64_t producer_id, sequence_id, highest_sequence_id;
    int has_producer_id, has_sequence_id, is_chunk;
} send_fields;

/* A varint that must fit a non-negative int32 (num_messages, num_messages_in_batch, chunk fields). */
static int read_int32(qs_pb_cursor *c, uint64_t *v) {
    if (qs_pb_varint(c, v)) return 0;
    return *v <= 0x7FFFFFFFu;
}

/* A varint that must be a canonical bool (0 or 1). */
static int read_bool(qs_pb_cursor *c, uint64_t *v) {
    if (qs_pb_varint(c, v)) return 0;
    return *v <= 1;
}

/* A 10-byte varint may carry bits past 64; the generic parser truncates, the fast path declines. */
static int read_u64(qs_pb_cursor *c, uint64_t *v) {
    const uint8_t *start = c->p;
    if (qs_pb_varint(c, v)) return 0;
    return !(c->p - start == 10 && start[9] > 1);
}

static int read_string(qs_pb_cursor *c) {
    const uint8_t *data;
    size_t len;
    if (qs_pb_bytes(c, &data, &len)) return 0;
    return qs_utf8_valid(data, len);
}

/* CommandSend: producer_id 1, sequence_id 2, num_messages 3, highest_sequence_id 6, is_chunk 7. */
static int scan_command_send(const uint8_t *p, size_t len, send_fields *out) {
    qs_pb_cursor c = {p, p + len};
    uint64_t v;
    while (c.p < c.end) {
        uint32_t field, wt;
        if (qs_pb_tag(&c, &field, &wt) || wt != 0) return 0;
        switch (field) {
        case 1:
            if (!read_u64(&c, &out->producer_id)) return 0;
            out->has_producer_id = 1;
            break;
        case 2:
            if (!read_u64(&c, &out->sequence_id)) return 0;
            out->has_sequence_id = 1;
            break;
        case 3:
            if (!read_int32(&c, &v)) return 0;
            break;
        case 6:
            if (!read_u64(&c, &out->highest_sequence_id)) return 0;
            break;
        case 7:
            if (!read_bool(&c, &v)) return 0;
            out->is_chunk = (int)v;
            break;
        default:
            return 0; /* txnid, marker, message_id, unknown: the generic path */
        }
    }
    return out->has_producer_id && out->has_sequence_id;
}

/* BaseCommand: type 1 must be SEND, send 6 once, nothing else. */
static int scan_base_command(const uint8_t *p, size_t len, send_fields *out) {
    qs_pb_cursor c = {p, p + len};
    uint64_t type = 0;
    int has_type = 0, has_send = 0;
    while (c.p < c.end) {
        uint32_t field, wt;
        if (qs_pb_tag(&c, &field, &wt)) return 0;
        if (field == 1 && wt == 0) {
            if (qs_pb_varint(&c, &type)) return 0;
            has_type = 1;
        } else if (field == 6 && wt == 2 && !has_send) {
            const uint8_t *data;
            size_t n;
            if (qs_pb_bytes(&c, &data, &n) || !scan_command_send(data, n, out)) return 0;
            has_send = 1;
        } else {
            return 0;
        }
    }
    return has_type && type == SEND_TYPE && has_send;
}

/* KeyValue: key 1 and value 2, both strings, both required. */
static int scan_key_value(const uint8_t *p, size_t len) {
    qs_pb_cursor c = {p, p + len};
    int has_key = 0, has_value = 0;
    while (c.p < c.end) {
        uint32_t field, wt;
        if (qs_pb_tag(&c, &field, &wt) || wt != 2 || (field != 1 && field != 2)) return 0;
        if (!read_string(&c)) return 0;
        if (field == 1) has_key = 1;
        else has_value = 1;
    }
    return has_key && has_value;
}

/* MessageMetadata (PulsarApi.proto); *messages gets num_messages_in_batch when present, else 1. */
static int scan_message_metadata(const uint8_t *p, size_t len, long *messages) {
    qs_pb_cursor c = {p, p + len};
    int has_producer_name = 0, has_sequence_id = 0, has_publish_time = 0;
    uint64_t v;
    *messages = 1;
    while (c.p < c.end) {
        uint32_t field, wt;
        if (qs_pb_tag(&c, &field, &wt)) return 0;
        switch (field) {
        case 1: /* producer_name */
            if (wt != 2 || !read_string(&c)) return 0;
            has_producer_name = 1;
            break;
        case 4: { /* properties */
            const uint8_t *data;
            size_t n;
            if (wt != 2 || qs_pb_bytes(&c, &data, &n) || !scan_key_value(data, n)) return 0;
            break;
        }
        case 5:  /* replicated_from */
        case 6:  /* partition_key */
        case 7:  /* replicate_to */
        case 14: /* encryption_algo */
        case 26: /* uuid */
            if (wt != 2 || !read_string(&c)) return 0;
            break;
        case 15: /* encryption_param */
        case 16: /* schema_version */
        case 18: /* ordering_key */
            if (wt != 2 || qs_pb_skip(&c, wt)) return 0;
            break;
        case 2: /* sequence_id */
        case 3: /* publish_time */
            if (wt != 0 || !read_u64(&c, &v)) return 0;
            if (field == 2) has_sequence_id = 1;
            else has_publish_time = 1;
            break;
        case 12: /* event_time */
        case 19: /* deliver_at_time (int64: any 64-bit pattern) */
        case 24: /* highest_sequence_id */
            if (wt != 0 || !read_u64(&c, &v)) return 0;
            break;
        case 8: /* compression: NONE LZ4 ZLIB ZSTD SNAPPY */
            if (wt != 0 || qs_pb_varint(&c, &v) || v > 4) return 0;
            break;
        case 9: /* uncompressed_size (uint32) */
            if (wt != 0 || qs_pb_varint(&c, &v) || v > 0xFFFFFFFFu) return 0;
            break;
        case 11: /* num_messages_in_batch */
            if (wt != 0 || !read_int32(&c, &v)) return 0;
            *messages = (long)v;
            break;
        case 27: /* num_chunks_from_msg */
        case 28: /* total_chunk_msg_size */
        case 29: /* chunk_id */
            if (wt != 0 || !read_int32(&c, &v)) return 0;
            break;
        case 17: /* partition_key_b64_encoded */
        case 25: /* null_value */
        case 30: /* null_partition_key */
            if (wt != 0 || !read_bool(&c, &v)) return 0;
            break;
        default: /* encryption_keys, marker_type, txnid, unknown fields: the generic path */
            return 0;
        }
    }
    return has_producer_name && has_sequence_id && has_publish_time;
}

PyDoc_STRVAR(parse_send_doc,
             "parse_send(buffer, command_start, command_end, frame_end) -> tuple | None\n\n"
             "Read the SEND frame whose BaseCommand is buffer[command_start:command_end] and whose payload\n"
             "headers run from command_end to frame_end (byte offsets). Returns (producer_id, sequence_id,\n"
             "highest_sequence_id (0 when absent), is_chunk, messages_in_entry, checksum_ok (None without a\n"
             "checksum)) or None when the frame is not a plain, valid SEND (the generic decoder then decides).\n"
             "Raises ValueError only when the offsets do not fit the buffer.");

static PyObject *parse_send(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "parse_send() takes exactly 4 arguments");
        return NULL;
    }
    Py_ssize_t offsets[3];
    for (int i = 0; i < 3; i++) {
        offsets[i] = PyNumber_AsSsize_t(args[i + 1], PyExc_OverflowError);
        if (offsets[i] == -1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t command_start = offsets[0], command_end = offsets[1], frame_end = offsets[2];
    if (command_start < 0 || command_start > command_end || command_end > frame_end || frame_end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "parse_send: offsets outside the buffer");
        return NULL;
    }
    const uint8_t *base = (const uint8_t *)view.buf;
    send_fields send = {0};
    long messages = 1;
    int checksum_state = -1; /* -1 none, 0 mismatch, 1 match */
    int accepted = 0;
    const uint8_t *p = base + command_end, *end = base + frame_end;
    if (scan_base_command(base + command_start, (size_t)(command_end - command_start), &send)) {
        /* headers: no broker entry metadata on a SEND the fast path takes */
        if (!(end - p >= 2 && p[0] == 0x0E && p[1] == 0x02)) {
            uint32_t stored_crc = 0;
            if (end - p >= 2 && p[0] == 0x0E && p[1] == 0x01) {
                if (end - p >= 6) {
                    stored_crc = qs_be32(p + 2);
                    checksum_state = 0;
                    p += 6;
                } else {
                    p = NULL;
                }
            }
            if (p != NULL && end - p >= 4) {
                const uint8_t *checksum_start = p;
                uint32_t metadata_size = qs_be32(p);
                p += 4;
                if ((size_t)(end - p) >= metadata_size && scan_message_metadata(p, metadata_size, &messages)) {
                    accepted = 1;
                    if (checksum_state == 0) {
                        size_t span = (size_t)(end - checksum_start);
                        uint32_t crc;
                        if (span > CRC_GIL_RELEASE_BYTES) {
                            Py_BEGIN_ALLOW_THREADS crc = qs_crc32c(0, checksum_start, span);
                            Py_END_ALLOW_THREADS
                        } else {
                            crc = qs_crc32c(0, checksum_start, span);
                        }
                        checksum_state = crc == stored_crc;
                    }
                }
            }
        }
    }
    PyBuffer_Release(&view);
    if (!accepted) Py_RETURN_NONE;
    PyObject *checksum_ok = checksum_state < 0 ? Py_None : (checksum_state ? Py_True : Py_False);
    return Py_BuildValue("(KKKOlO)", (unsigned long long)send.producer_id, (unsigned long long)send.sequence_id,
                         (unsigned long long)send.highest_sequence_id, send.is_chunk ? Py_True : Py_False,
                         messages, checksum_ok);
}

/* ------------------------------------------------------------------ SEND_RECEIPT */

/* The first bytes of a frame whose BaseCommand is {type, <one sub-message of body_size bytes>}:
 * [totalSize][commandSize][0x08 type][sub-message tag][body_size varint]; returns the write position. */
static uint8_t *put_command_head(uint8_t *out, size_t total_size, size_t command_size, uint8_t type, uint8_t tag,
                                 size_t body_size) {
    qs_put_be32(out, (uint32_t)total_size);
    qs_put_be32(out + 4, (uint32_t)command_size);
    uint8_t *p = out + 8;
    *p++ = 0x08; /* BaseCommand.type */
    *p++ = type;
    *p++ = tag; /* the sub-message's field, length-delimited */
    return p + qs_pb_put_varint(p, body_size);
}

/* A MessageIdData field: tag, size (id_size counts whatever the caller writes after), ledgerId, entryId. */
static uint8_t *put_message_id(uint8_t *p, uint8_t tag, size_t id_size, uint64_t ledger_id, uint64_t entry_id) {
    *p++ = tag;
    p += qs_pb_put_varint(p, id_size);
    *p++ = 0x08; /* ledgerId */
    p += qs_pb_put_varint(p, ledger_id);
    *p++ = 0x10; /* entryId */
    return p + qs_pb_put_varint(p, entry_id);
}

PyDoc_STRVAR(encode_send_receipt_doc,
             "encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id) -> bytes\n\n"
             "The whole SEND_RECEIPT frame ([totalSize][commandSize][BaseCommand]) with\n"
             "message_id{ledgerId, entryId}; highest_sequence_id None leaves the field out. Ids are ints: producer,\n"
             "sequence and highest sequence ids uint64; ledger and entry ids int64 (negative ones as their uint64\n"
             "wire value, as the protobuf builder). Raises ValueError for a value outside its range, TypeError for\n"
             "a non-int. Same bytes as commands.new_send_receipt's protobuf encoding (Pulsar Commands.newSendReceipt).");

static PyObject *encode_send_receipt(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_send_receipt() takes exactly 5 arguments");
        return NULL;
    }
    uint64_t producer_id, sequence_id, ledger_id, entry_id, highest = 0;
    int has_highest = args[4] != Py_None;
    if (qs_arg_unsigned(args[0], "producer_id", UINT64_MAX, &producer_id) ||
        qs_arg_unsigned(args[1], "sequence_id", UINT64_MAX, &sequence_id) || qs_arg_id(args[2], "ledger_id", &ledger_id) ||
        qs_arg_id(args[3], "entry_id", &entry_id) ||
        (has_highest && qs_arg_unsigned(args[4], "highest_sequence_id", UINT64_MAX, &highest)))
        return NULL;
    size_t id_size = 2 + qs_pb_varint_size(ledger_id) + qs_pb_varint_size(entry_id);
    size_t receipt_size = 2 + qs_pb_varint_size(producer_id) + qs_pb_varint_size(sequence_id) + 1 + qs_pb_varint_size(id_size) + id_size +
                          (has_highest ? 1 + qs_pb_varint_size(highest) : 0);
    size_t command_size = 2 + 1 + qs_pb_varint_size(receipt_size) + receipt_size;
    PyObject *frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 + command_size));
    if (frame == NULL) return NULL;
    /* SEND_RECEIPT (7) in BaseCommand.send_receipt (field 7: tag 0x3A) */
    uint8_t *p = put_command_head((uint8_t *)PyBytes_AS_STRING(frame), command_size + 4, command_size, 7, 0x3A,
                                  receipt_size);
    *p++ = 0x08; /* producer_id */
    p += qs_pb_put_varint(p, producer_id);
    *p++ = 0x10; /* sequence_id */
    p += qs_pb_put_varint(p, sequence_id);
    p = put_message_id(p, 0x1A, id_size, ledger_id, entry_id); /* message_id (field 3) */
    if (has_highest) {
        *p++ = 0x20; /* highest_sequence_id */
        p += qs_pb_put_varint(p, highest);
    }
    return frame;
}

/* ------------------------------------------------------------------ stored entries */

PyDoc_STRVAR(entry_dispatch_info_doc,
             "entry_dispatch_info(entry) -> (num_messages, deliver_at_time)\n\n"
             "What a dispatcher needs of a stored entry ([0x0e02 bem]? [0x0e01 crc]? [u32 size][MessageMetadata]\n"
             "[payload]): num_messages_in_batch when present, else 1 (int32, as protobuf reads it), and\n"
             "deliver_at_time in ms, 0 when absent (int64). Walks the metadata's wire format only (the entry was\n"
             "validated when it was published). Raises ValueError when the headers or the metadata are\n"
             "truncated or malformed.");

static PyObject *entry_dispatch_info(PyObject *module, PyObject *entry) {
    Py_buffer view;
    if (PyObject_GetBuffer(entry, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    const char *error = NULL;
    int64_t messages = 1, deliver_at = 0;
    if (end - p >= 2 && p[0] == 0x0E && p[1] == 0x02) {
        if (end - p < 6 || qs_be32(p + 2) > (size_t)(end - p - 6)) {
            error = "broker entry metadata runs past the end of the entry";
            goto done;
        }
        p += 6 + qs_be32(p + 2);
    }
    if (end - p >= 2 && p[0] == 0x0E && p[1] == 0x01) {
        if (end - p < 6) {
            error = "checksum header runs past the end of the entry";
            goto done;
        }
        p += 6;
    }
    if (end - p < 4 || qs_be32(p) > (size_t)(end - p - 4)) {
        error = "metadata size runs past the end of the entry";
        goto done;
    }
    qs_pb_cursor c = {p + 4, p + 4 + qs_be32(p)};
    while (c.p < c.end) {
        uint32_t field, wt;
        uint64_t v;
        if (qs_pb_tag(&c, &field, &wt)) {
            error = "malformed MessageMetadata";
            goto done;
        }
        if (wt == 0 && (field == 11 || field == 19)) {
            if (qs_pb_varint(&c, &v)) {
                error = "malformed MessageMetadata";
                goto done;
            }
            if (field == 11) messages = (int32_t)(uint32_t)v;
            else deliver_at = (int64_t)v;
        } else if (qs_pb_skip(&c, wt)) {
            error = "malformed MessageMetadata";
            goto done;
        }
    }
done:
    PyBuffer_Release(&view);
    if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    return Py_BuildValue("(LL)", (long long)messages, (long long)deliver_at);
}

/* ------------------------------------------------------------------ MESSAGE */

#define MAX_ACK_SET_WORDS 65536 /* 4 Mi batch indexes: more than any batch a max-size entry can hold */

PyDoc_STRVAR(encode_message_header_doc,
             "encode_message_header(consumer_id, ledger_id, entry_id, partition, redelivery_count, ack_set,\n"
             "                      consumer_epoch, payload_size) -> bytes\n\n"
             "[totalSize][commandSize][BaseCommand MESSAGE] for a MESSAGE whose stored bytes (payload_size of\n"
             "them) follow unchanged. message_id{ledgerId, entryId, partition}; redelivery_count only when > 0 (at\n"
             "most 2^32-1);\n"
             "ack_set (a sequence of int64 words) and consumer_epoch only when not None. Ids as\n"
             "encode_send_receipt; partition an int32; redelivery_count a uint32. Raises ValueError for a value\n"
             "out of range (or an ack_set over 65,536 words, or a frame over 4 GiB), TypeError for a wrong type.\n"
             "Same bytes as the protobuf encoding of Pulsar Commands.newMessageCommand.");

static PyObject *encode_message_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "encode_message_header() takes exactly 8 arguments");
        return NULL;
    }
    uint64_t consumer_id, ledger_id, entry_id, epoch = 0, payload_size;
    long long partition, redelivery;
    if (qs_arg_unsigned(args[0], "consumer_id", UINT64_MAX, &consumer_id) || qs_arg_id(args[1], "ledger_id", &ledger_id) ||
        qs_arg_id(args[2], "entry_id", &entry_id) || qs_arg_signed(args[3], "partition", INT32_MIN, INT32_MAX, &partition) ||
        qs_arg_signed(args[4], "redelivery_count", LLONG_MIN, UINT32_MAX, &redelivery) ||
        (args[6] != Py_None && qs_arg_unsigned(args[6], "consumer_epoch", UINT64_MAX, &epoch)) ||
        qs_arg_unsigned(args[7], "payload_size", UINT32_MAX, &payload_size))
        return NULL;
    int has_redelivery = redelivery > 0; /* 0 or less: the field is left out */
    PyObject *words = NULL;
    Py_ssize_t n_words = 0;
    if (args[5] != Py_None) {
        words = PySequence_Fast(args[5], "ack_set must be a sequence of ints");
        if (words == NULL) return NULL;
        n_words = PySequence_Fast_GET_SIZE(words);
        if (n_words > MAX_ACK_SET_WORDS) {
            Py_DECREF(words);
            PyErr_SetString(PyExc_ValueError, "ack_set has more than 65536 words");
            return NULL;
        }
    }
    uint64_t stack_words[16];
    uint64_t *wire_words = stack_words;
    if (n_words > 16) {
        wire_words = PyMem_Malloc((size_t)n_words * sizeof(uint64_t));
        if (wire_words == NULL) {
            Py_DECREF(words);
            return PyErr_NoMemory();
        }
    }
    size_t ack_size = 0;
    for (Py_ssize_t i = 0; i < n_words; i++) {
        long long word;
        if (qs_arg_signed(PySequence_Fast_GET_ITEM(words, i), "ack_set word", INT64_MIN, INT64_MAX, &word)) goto fail;
        wire_words[i] = (uint64_t)word;
        ack_size += 1 + qs_pb_varint_size(wire_words[i]);
    }
    size_t id_size = 3 + qs_pb_varint_size(ledger_id) + qs_pb_varint_size(entry_id) + qs_pb_varint_size((uint64_t)partition);
    size_t message_size = 1 + qs_pb_varint_size(consumer_id) + 1 + qs_pb_varint_size(id_size) + id_size +
                          (has_redelivery ? 1 + qs_pb_varint_size((uint64_t)redelivery) : 0) + ack_size +
                          (args[6] != Py_None ? 1 + qs_pb_varint_size(epoch) : 0);
    size_t command_size = 2 + 1 + qs_pb_varint_size(message_size) + message_size;
    if (4 + command_size + payload_size > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_ValueError, "the MESSAGE frame does not fit the u32 totalSize field");
        goto fail;
    }
    PyObject *header = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 + command_size));
    if (header == NULL) goto fail;
    /* MESSAGE (9) in BaseCommand.message (field 9: tag 0x4A) */
    uint8_t *p = put_command_head((uint8_t *)PyBytes_AS_STRING(header), 4 + command_size + payload_size,
                                  command_size, 9, 0x4A, message_size);
    *p++ = 0x08; /* consumer_id */
    p += qs_pb_put_varint(p, consumer_id);
    p = put_message_id(p, 0x12, id_size, ledger_id, entry_id); /* message_id (field 2), then its partition */
    *p++ = 0x18; /* partition */
    p += qs_pb_put_varint(p, (uint64_t)partition); /* an int32 is sign-extended, as protobuf writes it */
    if (has_redelivery) {
        *p++ = 0x18; /* redelivery_count */
        p += qs_pb_put_varint(p, (uint64_t)redelivery);
    }
    for (Py_ssize_t i = 0; i < n_words; i++) {
        *p++ = 0x20; /* ack_set (repeated int64, not packed in proto2) */
        p += qs_pb_put_varint(p, wire_words[i]);
    }
    if (args[6] != Py_None) {
        *p++ = 0x28; /* consumer_epoch */
        p += qs_pb_put_varint(p, epoch);
    }
    if (wire_words != stack_words) PyMem_Free(wire_words);
    Py_XDECREF(words);
    return header;
fail:
    if (wire_words != stack_words) PyMem_Free(wire_words);
    Py_XDECREF(words);
    return NULL;
}

static PyMethodDef methods[] = {
    {"entry_dispatch_info", (PyCFunction)entry_dispatch_info, METH_O, entry_dispatch_info_doc},
    {"encode_message_header", (PyCFunction)(void (*)(void))encode_message_header, METH_FASTCALL,
     encode_message_header_doc},
    {"parse_send", (PyCFunction)(void (*)(void))parse_send, METH_FASTCALL, parse_send_doc},
    {"encode_send_receipt", (PyCFunction)(void (*)(void))encode_send_receipt, METH_FASTCALL,
     encode_send_receipt_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "quasar.protocol._frames_c",
    "The broker's SEND fast path, compiled; see quasar.protocol._frames_py for the twin and the contract.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__frames_c(void) {
    qs_crc32c_init();
    return PyModule_Create(&module_def);
}
