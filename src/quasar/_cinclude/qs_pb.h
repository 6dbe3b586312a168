/* Bounds-checked reading of the protobuf wire format (proto2, as Pulsar's PulsarApi.proto uses it).
 *
 * Header-only, no Python API: safe to call with the GIL released. Every reader takes a cursor
 * [p, end) and never reads at or past `end`; on malformed input it returns a negative QS_PB_* code and
 * leaves the cursor unspecified. Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32;
 * groups (3, 4) are refused as malformed, as Pulsar's messages have none.
 */
#ifndef QS_PB_H
#define QS_PB_H

#include <stddef.h>
#include <stdint.h>

#define QS_PB_OK 0
#define QS_PB_TRUNCATED (-1)   /* a field runs past the end of the buffer */
#define QS_PB_BAD_VARINT (-2)  /* a varint longer than 10 bytes */
#define QS_PB_BAD_WIRETYPE (-3) /* wire type 3, 4, 6 or 7, or field number 0 */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} qs_pb_cursor;

/* Read one varint (at most 10 bytes) into *out. */
static inline int qs_pb_varint(qs_pb_cursor *c, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->p >= c->end) return QS_PB_TRUNCATED;
        uint8_t byte = *c->p++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return QS_PB_OK;
        }
    }
    return QS_PB_BAD_VARINT;
}

/* Read a tag: field number and wire type. Refuses field 0 and group/invalid wire types. */
static inline int qs_pb_tag(qs_pb_cursor *c, uint32_t *field, uint32_t *wire_type) {
    uint64_t tag;
    int rc = qs_pb_varint(c, &tag);
    if (rc) return rc;
    *wire_type = (uint32_t)(tag & 7);
    uint64_t number = tag >> 3;
    if (number == 0 || number > 536870911u) return QS_PB_BAD_WIRETYPE;
    if (*wire_type == 3 || *wire_type == 4 || *wire_type == 6 || *wire_type == 7) return QS_PB_BAD_WIRETYPE;
    *field = (uint32_t)number;
    return QS_PB_OK;
}

/* Read the length prefix of a wire-type-2 field; data and len give its bytes; the cursor moves past them. */
static inline int qs_pb_bytes(qs_pb_cursor *c, const uint8_t **data, size_t *len) {
    uint64_t n;
    int rc = qs_pb_varint(c, &n);
    if (rc) return rc;
    if (n > (uint64_t)(c->end - c->p)) return QS_PB_TRUNCATED;
    *data = c->p;
    *len = (size_t)n;
    c->p += n;
    return QS_PB_OK;
}

/* Skip the value of a field of `wire_type` (after its tag). */
static inline int qs_pb_skip(qs_pb_cursor *c, uint32_t wire_type) {
    uint64_t ignored;
    const uint8_t *data;
    size_t len;
    switch (wire_type) {
    case 0:
        return qs_pb_varint(c, &ignored);
    case 1:
        if (c->end - c->p < 8) return QS_PB_TRUNCATED;
        c->p += 8;
        return QS_PB_OK;
    case 2:
        return qs_pb_bytes(c, &data, &len);
    case 5:
        if (c->end - c->p < 4) return QS_PB_TRUNCATED;
        c->p += 4;
        return QS_PB_OK;
    default:
        return QS_PB_BAD_WIRETYPE;
    }
}

/* Bytes of `v` as a varint (1 to 10). */
static inline size_t qs_pb_varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Write `v` as a varint at `out` (room for 10 bytes); returns the bytes written. */
static inline size_t qs_pb_put_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static inline uint32_t qs_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint16_t qs_be16(const uint8_t *p) { return (uint16_t)(((uint16_t)p[0] << 8) | p[1]); }

static inline void qs_put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

#endif /* QS_PB_H */
