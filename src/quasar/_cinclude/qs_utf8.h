/* Strict UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF), the rule that
 * protobuf applies to proto2 `string` fields and Python's bytes.decode("utf-8") applies. Header-only, no
 * Python API: safe with the GIL released. */
#ifndef QS_UTF8_H
#define QS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* 1 when [s, s+len) is valid UTF-8, else 0. */
static inline int qs_utf8_valid(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
            cp = b & 0x1F;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            cp = b & 0x0F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            cp = b & 0x07;
        } else {
            return 0;
        }
        if (len - i <= need) return 0;
        for (size_t k = 1; k <= need; k++) {
            uint8_t cb = s[i + k];
            if ((cb & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (cb & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += need + 1;
    }
    return 1;
}

#endif /* QS_UTF8_H */
