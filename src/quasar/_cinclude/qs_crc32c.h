/* CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF), the checksum of
 * Pulsar's payload frames; the same values as the `crc32c` package (check value of "123456789" is
 * 0xE3069283). Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time), else
 * slicing-by-8 tables. Header-only, no Python API: safe with the GIL released.
 *
 * qs_crc32c_init() must be called once (from the module's init) before qs_crc32c(). */
#ifndef QS_CRC32C_H
#define QS_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t qs_crc32c_table[8][256];
static int qs_crc32c_hw;

static void qs_crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        qs_crc32c_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = qs_crc32c_table[0][n];
        for (int k = 1; k < 8; k++) {
            crc = qs_crc32c_table[0][crc & 0xFF] ^ (crc >> 8);
            qs_crc32c_table[k][n] = crc;
        }
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    qs_crc32c_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t qs_crc32c_sw(uint32_t crc, const uint8_t *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        crc = qs_crc32c_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc; /* little-endian hosts only (x86-64, aarch64) */
        crc = qs_crc32c_table[7][word & 0xFF] ^ qs_crc32c_table[6][(word >> 8) & 0xFF] ^
              qs_crc32c_table[5][(word >> 16) & 0xFF] ^ qs_crc32c_table[4][(word >> 24) & 0xFF] ^
              qs_crc32c_table[3][(word >> 32) & 0xFF] ^ qs_crc32c_table[2][(word >> 40) & 0xFF] ^
              qs_crc32c_table[1][(word >> 48) & 0xFF] ^ qs_crc32c_table[0][word >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = qs_crc32c_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t qs_crc32c_hw_run(uint32_t crc, const uint8_t *p, size_t len) {
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

/* CRC-32C of [p, p+len), continuing from `value` (the CRC of the bytes before; 0 to start). */
static inline uint32_t qs_crc32c(uint32_t value, const uint8_t *p, size_t len) {
    uint32_t crc = value ^ 0xFFFFFFFFu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (qs_crc32c_hw) return qs_crc32c_hw_run(crc, p, len) ^ 0xFFFFFFFFu;
#endif
    return qs_crc32c_sw(crc, p, len) ^ 0xFFFFFFFFu;
}

#endif /* QS_CRC32C_H */
