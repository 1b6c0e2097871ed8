/*
 * hash.c - the table hash (a folded-multiply hash), SipHash-2-4 with 64-
 * and 128-bit output, and the digest of long keys built on it. See hash.h
 * for the contracts.
 */
#include "agent/hash.h"

#include <stdbool.h>

/* Odd constants with well-spread bits (golden ratio and friends). */
#define HASH_P0 0x9e3779b97f4a7c15ULL
#define HASH_P1 0xbf58476d1ce4e5b9ULL
#define HASH_P2 0x94d049bb133111ebULL
#define HASH_P3 0xd6e8feb86659fd93ULL

/* Little-endian 64-bit read of 8 bytes from any alignment. */
static inline uint64_t hash_rd64(const uint8_t *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
	       (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
	       (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

/* Little-endian read of n < 8 bytes, zero-extended. */
static inline uint64_t hash_rd_tail(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The 128-bit product of a and b folded to 64 bits (low half xor high
 * half): every input bit reaches many output bits in one multiply. */
static inline uint64_t hash_fold_mul(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
	unsigned __int128 r = (unsigned __int128)a * b;

	return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
	uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
	uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
	uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
	uint64_t lo = (ll & 0xffffffffu) | mid << 32;
	uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);

	return lo ^ hi;
#endif
}

/* Final avalanche so that both the high bits (bucket) and the low bits
 * (fingerprint) depend on every input bit. */
static inline uint64_t hash_finish(uint64_t h, uint64_t len, uint64_t s1)
{
	h = hash_fold_mul(h ^ HASH_P3, len ^ s1);
	h ^= h >> 32;
	h *= HASH_P1;
	h ^= h >> 29;
	return h;
}

uint64_t hash_64(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t s0 = seed ^ HASH_P0, s1 = (seed * HASH_P1) ^ HASH_P2;
	uint64_t h = s0;
	size_t n = len;

	/* Each 16-byte block is folded into the chain value: the block goes
	 * through the multiply together with h, so order matters. */
	while (n >= 16) {
		h = hash_fold_mul(hash_rd64(p) ^ s1 ^ h, hash_rd64(p + 8) ^ s0);
		p += 16;
		n -= 16;
	}
	if (n > 0) {
		uint64_t a = n >= 8 ? hash_rd64(p) : hash_rd_tail(p, n);
		uint64_t b = n > 8 ? hash_rd_tail(p + 8, n - 8) : 0;

		h = hash_fold_mul(a ^ s1 ^ h, b ^ s0);
	}
	return hash_finish(h, len, s1);
}

uint64_t hash_words(const uint64_t *w, size_t n, uint64_t seed)
{
	uint64_t s0 = seed ^ HASH_P0, s1 = (seed * HASH_P1) ^ HASH_P2;
	uint64_t h = s0;
	size_t i;

	for (i = 0; i + 2 <= n; i += 2)
		h = hash_fold_mul(w[i] ^ s1 ^ h, w[i + 1] ^ s0);
	if (i < n)
		h = hash_fold_mul(w[i] ^ s1 ^ h, s0);
	return hash_finish(h, n, s1);
}

/*
 * SipHash-c-d (2-4; 1-3 for hash_siphash13_words). State v0..v3 from the key and four constants (the ASCII of
 * "somepseudorandomlygeneratedbytes"); each 8-byte little-endian message
 * word m is absorbed as v3 ^= m, c SipRounds, v0 ^= m. The last word
 * holds the 0..7 remaining bytes and the length mod 256 in its top byte.
 * Finalisation: v2 ^= 0xff, d SipRounds, output v0^v1^v2^v3. The
 * 128-bit variant starts with v1 ^= 0xee, finalises with v2 ^= 0xee for
 * the first half, then v1 ^= 0xdd and four more rounds for the second.
 */
struct hash_sip {
	uint64_t v0, v1, v2, v3;
};

static inline uint64_t hash_rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static inline void hash_sipround(struct hash_sip *s)
{
	s->v0 += s->v1;
	s->v1 = hash_rotl(s->v1, 13);
	s->v1 ^= s->v0;
	s->v0 = hash_rotl(s->v0, 32);
	s->v2 += s->v3;
	s->v3 = hash_rotl(s->v3, 16);
	s->v3 ^= s->v2;
	s->v0 += s->v3;
	s->v3 = hash_rotl(s->v3, 21);
	s->v3 ^= s->v0;
	s->v2 += s->v1;
	s->v1 = hash_rotl(s->v1, 17);
	s->v1 ^= s->v2;
	s->v2 = hash_rotl(s->v2, 32);
}

/* A message word absorbed with c SipRounds (SipHash-c-d's c). */
static inline void hash_sip_absorb(struct hash_sip *s, uint64_t m, int c)
{
	s->v3 ^= m;
	for (int i = 0; i < c; i++)
		hash_sipround(s);
	s->v0 ^= m;
}

/* The state from the key (wide: the 128-bit output variant). */
static inline void hash_sip_init(struct hash_sip *s, const uint8_t key[16], bool wide)
{
	uint64_t k0 = hash_rd64(key), k1 = hash_rd64(key + 8);

	s->v0 = k0 ^ 0x736f6d6570736575ULL;
	s->v1 = k1 ^ 0x646f72616e646f6dULL;
	s->v2 = k0 ^ 0x6c7967656e657261ULL;
	s->v3 = k1 ^ 0x7465646279746573ULL;
	if (wide)
		s->v1 ^= 0xee;
}

/* SipHash-2-4's state initialised and the whole message absorbed. */
static void hash_sip_run(struct hash_sip *s, const uint8_t key[16], const uint8_t *p, size_t len,
			 bool wide)
{
	size_t n = len;

	hash_sip_init(s, key, wide);
	while (n >= 8) {
		hash_sip_absorb(s, hash_rd64(p), 2);
		p += 8;
		n -= 8;
	}
	hash_sip_absorb(s, hash_rd_tail(p, n) | (uint64_t)(len & 0xff) << 56, 2);
}

/* Finalisation's d SipRounds and the output word. */
static inline uint64_t hash_sip_out(struct hash_sip *s, int d)
{
	for (int i = 0; i < d; i++)
		hash_sipround(s);
	return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

uint64_t hash_siphash24(const uint8_t key[16], const void *data, size_t len)
{
	struct hash_sip s;

	hash_sip_run(&s, key, data, len, false);
	s.v2 ^= 0xff;
	return hash_sip_out(&s, 4);
}

uint64_t hash_siphash13_words(const uint8_t key[16], const uint64_t *w, size_t n)
{
	struct hash_sip s;

	hash_sip_init(&s, key, false);
	for (size_t i = 0; i < n; i++)
		hash_sip_absorb(&s, w[i], 1);
	hash_sip_absorb(&s, (uint64_t)((8 * n) & 0xff) << 56, 1);
	s.v2 ^= 0xff;
	return hash_sip_out(&s, 3);
}

static void hash_wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void hash_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16])
{
	struct hash_sip s;

	hash_sip_run(&s, key, data, len, true);
	s.v2 ^= 0xee;
	hash_wr64(out, hash_sip_out(&s, 4));
	s.v1 ^= 0xdd;
	hash_wr64(out + 8, hash_sip_out(&s, 4));
}

const uint8_t hash_digest_public_key[16] = {
	's', 'p', 'o', 'a', '-', 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't', '-', 'k',
};

void hash_digest_key(const void *secret, size_t len, uint8_t key[16])
{
	/* The fixed key only spreads the bits; the secret is the input. */
	hash_siphash128(hash_digest_public_key, secret, len, key);
}

void hash_digest(const uint8_t key[16], const void *data, size_t len, char out[HASH_DIGEST_LEN])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t h[16];

	hash_siphash128(key, data, len, h);
	out[0] = '#';
	for (int i = 0; i < 16; i++) {
		out[1 + 2 * i] = hex[h[i] >> 4];
		out[2 + 2 * i] = hex[h[i] & 0xf];
	}
}
