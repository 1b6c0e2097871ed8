/*
 * http_admin.h - the admin endpoints of the HTTP front (docs/OPERATIONS.md):
 *
 *   GET /keys?namespace=NS&key=K   what this node holds of K, per window
 *   DELETE /keys?namespace=NS&key=K  forget K (local namespaces)
 *   GET /top?namespace=NS&n=N&by=hits|denied&window=W
 *                                  the heaviest keys of the current window
 *
 * The front checks http_admin_token first. Each writes a JSON answer (or
 * {"error": ...}) into out (cap bytes) and returns the HTTP status.
 */
#ifndef HTTP_ADMIN_H
#define HTTP_ADMIN_H

#include <stddef.h>

struct rl;
struct topk;

#define ADMIN_ANSWER_MAX (96u << 10)   /* the largest answer (GET /top, 100 keys) */

int admin_keys(struct rl *rl, const char *query, size_t qlen, double now, char *out, size_t cap);
/* DELETE /keys: forgets the key's counts on this node, every window
 * (namespaces that sync with a store: 501 for now, the store's part is
 * not built). */
int admin_forget(struct rl *rl, const char *query, size_t qlen, double now, char *out,
		 size_t cap);
int admin_top(struct rl *rl, struct topk *t, const char *query, size_t qlen, double now,
	      char *out, size_t cap);

#endif /* HTTP_ADMIN_H */
