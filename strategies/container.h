/*
 * container.h - container_of: from a member (a libev watcher embedded in
 * its owner, docs/STYLE.md, rule 4) back to the struct that holds it. The one
 * definition for agent/ and strategies/ (it lives at the lower layer: agent/
 * may include strategies/, never the reverse).
 */
#ifndef CONTAINER_H
#define CONTAINER_H

#include <stddef.h>

#define container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif /* CONTAINER_H */
