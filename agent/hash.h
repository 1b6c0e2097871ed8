/*
 * hash.h - the hash functions of the agent:
 *
 *   hash_64()          a fast keyed 64-bit hash for the shared counter table
 *                      (the seed is random per table, so clients cannot
 *                      aim many keys at one probe chain);
 *   hash_siphash24()   SipHash-2-4, 64-bit output;
 *   hash_siphash13_words()  SipHash-1-3 of whole 64-bit words, 64-bit
 *                      output: the MAC of a lease id (algo_concurrency.c),
 *                      on every acquire;
 *   hash_siphash128()  SipHash-2-4 with the 128-bit output, used for the
 *                      digest of over-long keys (same key on every node,
 *                      so every node maps a long key to the same digest);
 *   hash_digest()      that digest as text, '#' and 32 hex digits: the
 *                      agent's stored form of a long key (ratelimit.c) and
 *                      the nginx module's key too long for a frame
 *                      (agent/nginx_module/spoa_client.c), under a digest key
 *                      hash_digest_key() derives from a secret.
 *
 * SipHash is written from the published description (Aumasson and
 * Bernstein, "SipHash: a fast short-input PRF", 2012, and its 128-bit
 * output variant); the tests check it against the reference vectors.
 * Nothing here allocates or fails, and nothing is included but <stddef.h>
 * and <stdint.h>: the nginx module compiles this file too.
 */
#ifndef HASH_H
#define HASH_H

#include <stddef.h>
#include <stdint.h>

/* Keyed 64-bit hash of len bytes. Not a MAC: good mixing, all bits
 * usable (high bits pick the bucket, low bits make the fingerprint),
 * different for every seed. */
uint64_t hash_64(const void *data, size_t len, uint64_t seed);

/* The same construction over n 64-bit words (the table's zero-padded
 * keys), without re-reading bytes. Its values differ from hash_64()'s for
 * the same bytes: a table must use one or the other, consistently. */
uint64_t hash_words(const uint64_t *w, size_t n, uint64_t seed);

/* SipHash-2-4 of len bytes under a 16-byte key; 64-bit result (the
 * reference's output bytes read little-endian). */
uint64_t hash_siphash24(const uint8_t key[16], const void *data, size_t len);

/* SipHash-1-3 of the n words' 8n little-endian bytes (on any host) under
 * a 16-byte key, 64-bit result as hash_siphash24()'s: one SipRound per
 * message word and three to finish (the variant Rust's, CPython's and
 * Ruby's hash tables use against chosen input), about half SipHash-2-4's
 * cost for short input. No attack on it as a PRF is published; 2-4 stays
 * where the cost is rare (long keys' digests). */
uint64_t hash_siphash13_words(const uint8_t key[16], const uint64_t *w, size_t n);

/* SipHash-2-4 with 128-bit output; out gets the 16 bytes in the
 * reference's order (first half little-endian, then second half). */
void hash_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);

/* A digested key's text: '#' + 32 lowercase hex digits. */
#define HASH_DIGEST_LEN 33

/* The fixed SipHash key, ASCII "spoa-ratelimit-k": the public digest key
 * (an agent that syncs without key_secret) and the key under which
 * hash_digest_key() turns a secret into a digest key. */
extern const uint8_t hash_digest_public_key[16];

/* The digest key of a secret of len bytes (the agent's key_secret, the
 * nginx module's spoa_ratelimit_key_secret): SipHash-2-4-128 of the secret
 * under hash_digest_public_key. Any length in, 16 bytes out. */
void hash_digest_key(const void *secret, size_t len, uint8_t key[16]);

/* '#' and the 32 lowercase hex digits of SipHash-2-4-128(key, data), the
 * 16 output bytes in the reference's order, into out (HASH_DIGEST_LEN
 * bytes, no NUL). */
void hash_digest(const uint8_t key[16], const void *data, size_t len, char out[HASH_DIGEST_LEN]);

#endif /* HASH_H */
