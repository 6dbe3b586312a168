/* CRC-32 of zlib (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF): the checksum of
 * RocketMQ's commit log records (UtilAll.crc32); qs_crc32(value, p, len) equals zlib.crc32(data, value)
 * (check value of "123456789" is 0xCBF43926).
 *
 * Where the CPU has PCLMULQDQ (checked once at run time), runs of 64 bytes or more are folded with
 * carry-less multiplications, four 128-bit lanes at a time (four 512-bit lanes from 256 bytes on where it
 * also has AVX-512 and VPCLMULQDQ), then reduced to 32 bits with Barrett's method
 * (Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction", Intel, 2009;
 * the constants below are that paper's bit-reflected ones for this polynomial:
 * k1 = x^(4*128+32) mod P, k2 = x^(4*128-32) mod P, k3 = x^(128+32) mod P, k4 = x^(128-32) mod P,
 * k5 = x^64 mod P, each reflected and shifted left by one; mu = floor(x^64 / P) and P itself, reflected).
 * Shorter runs and the last 0-15 bytes go through slicing-by-8 tables. Header-only, no Python API: safe
 * with the GIL released.
 *
 * qs_crc32_init() must be called once (from the module's init) before qs_crc32(). */
#ifndef QS_CRC32_H
#define QS_CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QS_CRC32_CLMUL 1
#include <immintrin.h>
#endif

static uint32_t qs_crc32_table[8][256];
static int qs_crc32_clmul;
static int qs_crc32_avx512;

static void qs_crc32_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
        qs_crc32_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = qs_crc32_table[0][n];
        for (int k = 1; k < 8; k++) {
            crc = qs_crc32_table[0][crc & 0xFF] ^ (crc >> 8);
            qs_crc32_table[k][n] = crc;
        }
    }
#ifdef QS_CRC32_CLMUL
    __builtin_cpu_init();
    qs_crc32_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
    qs_crc32_avx512 = qs_crc32_clmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
#endif
}

/* Table-driven update of the inverted CRC state `crc` (little-endian hosts only: x86-64, aarch64). */
static uint32_t qs_crc32_sw(uint32_t crc, const uint8_t *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        crc = qs_crc32_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc;
        crc = qs_crc32_table[7][word & 0xFF] ^ qs_crc32_table[6][(word >> 8) & 0xFF] ^
              qs_crc32_table[5][(word >> 16) & 0xFF] ^ qs_crc32_table[4][(word >> 24) & 0xFF] ^
              qs_crc32_table[3][(word >> 32) & 0xFF] ^ qs_crc32_table[2][(word >> 40) & 0xFF] ^
              qs_crc32_table[1][(word >> 48) & 0xFF] ^ qs_crc32_table[0][word >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = qs_crc32_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef QS_CRC32_CLMUL
/* One fold step: a * k (low 64 bits of each times the matching constant) xor'ed into `next`. */
#define QS_CRC32_FOLD(a, k, next)                                                                        \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128((a), (k), 0x00), _mm_clmulepi64_si128((a), (k), 0x11)), \
                  (next))

/* 512-bit version of the fold (VPCLMULQDQ, AVX-512): four 512-bit lanes, 256 bytes per step, then the lanes
 * into one, 64-byte steps, and the four 128-bit parts of that lane into one, which is returned; *p and *len
 * are advanced past the bytes consumed (a multiple of 64). Needs *len >= 256. k1, k2 here are x^(2048+32)
 * and x^(2048-32) mod P (reflected, shifted), the 512-bit distance uses the 128-bit code's k1, k2 and the
 * 128-bit distance its k3, k4. */
#define QS_CRC32_FOLD512(a, k, next)                                                                          \
    _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128((a), (k), 0x00), _mm512_clmulepi64_epi128((a), (k), 0x11), \
                              (next), 0x96)

__attribute__((target("avx512f,vpclmulqdq,pclmul"))) static __m128i qs_crc32_fold512(uint32_t crc, const uint8_t **pp,
                                                                                      size_t *plen) {
    const uint8_t *p = *pp;
    size_t len = *plen;
    const __m512i k2048 = _mm512_set_epi64(0x01322d1430LL, 0x011542778aLL, 0x01322d1430LL, 0x011542778aLL,
                                           0x01322d1430LL, 0x011542778aLL, 0x01322d1430LL, 0x011542778aLL);
    const __m512i k512 = _mm512_set_epi64(0x01c6e41596LL, 0x0154442bd4LL, 0x01c6e41596LL, 0x0154442bd4LL,
                                          0x01c6e41596LL, 0x0154442bd4LL, 0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k128 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    __m512i a = _mm512_xor_si512(_mm512_loadu_si512((const void *)p), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    __m512i b = _mm512_loadu_si512((const void *)(p + 64));
    __m512i c = _mm512_loadu_si512((const void *)(p + 128));
    __m512i d = _mm512_loadu_si512((const void *)(p + 192));
    p += 256;
    len -= 256;
    while (len >= 256) {
        a = QS_CRC32_FOLD512(a, k2048, _mm512_loadu_si512((const void *)p));
        b = QS_CRC32_FOLD512(b, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        c = QS_CRC32_FOLD512(c, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        d = QS_CRC32_FOLD512(d, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        len -= 256;
    }
    a = QS_CRC32_FOLD512(a, k512, b);
    a = QS_CRC32_FOLD512(a, k512, c);
    a = QS_CRC32_FOLD512(a, k512, d);
    while (len >= 64) {
        a = QS_CRC32_FOLD512(a, k512, _mm512_loadu_si512((const void *)p));
        p += 64;
        len -= 64;
    }
    __m128i x = _mm512_extracti32x4_epi32(a, 0);
    x = QS_CRC32_FOLD(x, k128, _mm512_extracti32x4_epi32(a, 1));
    x = QS_CRC32_FOLD(x, k128, _mm512_extracti32x4_epi32(a, 2));
    x = QS_CRC32_FOLD(x, k128, _mm512_extracti32x4_epi32(a, 3));
    *pp = p;
    *plen = len;
    return x;
}
#undef QS_CRC32_FOLD512

/* Update of the inverted CRC state over len bytes, len >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse2"))) static uint32_t qs_crc32_fold(uint32_t crc, const uint8_t *p, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_set_epi32(0, -1, 0, -1);
    __m128i a;
    if (qs_crc32_avx512 && len >= 256) {
        a = qs_crc32_fold512(crc, &p, &len);
    } else {
        a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)crc));
        __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
        p += 64;
        len -= 64;
        while (len >= 64) { /* four independent lanes, 512 bits apart */
            a = QS_CRC32_FOLD(a, k1k2, _mm_loadu_si128((const __m128i *)p));
            b = QS_CRC32_FOLD(b, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
            c = QS_CRC32_FOLD(c, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
            d = QS_CRC32_FOLD(d, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64;
            len -= 64;
        }
        a = QS_CRC32_FOLD(a, k3k4, b); /* the lanes into one, 128 bits at a time */
        a = QS_CRC32_FOLD(a, k3k4, c);
        a = QS_CRC32_FOLD(a, k3k4, d);
    }
    while (len >= 16) {
        a = QS_CRC32_FOLD(a, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    /* 128 -> 96 bits, then 96 -> 64 bits */
    __m128i t = _mm_clmulepi64_si128(a, k3k4, 0x10);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    t = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00), t);
    /* Barrett reduction to 32 bits */
    t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), poly, 0x00);
    a = _mm_xor_si128(a, t);
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(a, 4));
}
#undef QS_CRC32_FOLD
#endif

/* zlib's crc32(value, p, len): the CRC-32 of [p, p+len) continuing from `value` (the CRC of the bytes
 * before; 0 to start). */
static inline uint32_t qs_crc32(uint32_t value, const uint8_t *p, size_t len) {
    uint32_t crc = value ^ 0xFFFFFFFFu;
#ifdef QS_CRC32_CLMUL
    if (qs_crc32_clmul && len >= 64) {
        size_t run = len & ~(size_t)15;
        crc = qs_crc32_fold(crc, p, run);
        p += run;
        len -= run;
    }
#endif
    return qs_crc32_sw(crc, p, len) ^ 0xFFFFFFFFu;
}

#endif /* QS_CRC32_H */
