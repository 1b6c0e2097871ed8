/*
 * segment.h - shared mappings: bytes that every process forked after the
 * mapping sees at the same address (the counter table, its state file,
 * the accept balance, the metrics, the heavy hitters, the published
 * configuration). The one place the agent calls mmap and munmap.
 *
 * Errors as malloc's: NULL with errno set (the caller words the message:
 * it knows what the bytes are for).
 */
#ifndef SEGMENT_H
#define SEGMENT_H

#include <stddef.h>

/* len bytes of anonymous shared memory, zeroed (every _Atomic integer a
 * valid 0). Call before fork(). NULL with errno on failure. */
void *segment_new(size_t len);

/* The first len bytes of the open file fd, shared: what a process writes
 * there reaches the file (the caller sizes it first). NULL with errno. */
void *segment_map_file(int fd, size_t len);

/* The same for len bytes of fd from byte off on (page aligned): the
 * limit overrides kept after a state file's table (agent/limits.c). */
void *segment_map_file_at(int fd, size_t off, size_t len);

/* Unmaps a segment of len bytes in this process. NULL is fine. */
void segment_free(void *p, size_t len);

#endif /* SEGMENT_H */
