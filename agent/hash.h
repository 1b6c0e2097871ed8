/*
 * hash.h - the hash functions of the agent:
 *
 *   hash_64()          a fast keyed 64-bit hash for the shared counter table
 *                      (the seed is random per table, so clients cannot
 *                      aim many keys at one probe chain);
 *   hash_siphash24()   SipHash-2-4, 64-bit output;
 *   hash_siphash128()  SipHash-2-4 with the 128-bit output, used for the
 *                      digest of over-long keys (same key on every node,
 *                      so every node maps a long key to the same digest).
 *
 * SipHash is written from the published description (Aumasson and
 * Bernstein, "SipHash: a fast short-input PRF", 2012, and its 128-bit
 * output variant); the tests check it against the reference vectors.
 * Nothing here allocates or fails.
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

/* SipHash-2-4 with 128-bit output; out gets the 16 bytes in the
 * reference's order (first half little-endian, then second half). */
void hash_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);

#endif /* HASH_H */
