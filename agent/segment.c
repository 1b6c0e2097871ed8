/*
 * segment.c - shared mappings (see segment.h).
 */
#include "agent/segment.h"

#include <sys/mman.h>

void *segment_new(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void *segment_map_file(int fd, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

void *segment_map_file_at(int fd, size_t off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);

	return p == MAP_FAILED ? NULL : p;
}

void segment_free(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}
