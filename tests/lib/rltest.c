/*
 * rltest.c - see rltest.h.
 */
#include "tests/lib/rltest.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rl *rltest_new(const char *name, const char *json, struct config *cfg)
{
	char path[] = "/tmp/rltest-XXXXXX", err[256];
	struct config_err cerr;
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
	close(fd);
	config_defaults(cfg);
	int rc = config_load(cfg, path, &cerr);
	unlink(path);
	cr_assert_eq(rc, 0, "%s: %s", cerr.path, cerr.msg);
	struct rl *rl = rl_new(name, cfg->max_keys, err, sizeof(err));
	cr_assert_not_null(rl, "%s", err);
	for (size_t i = 0; i < cfg->n_ns; i++)
		cr_assert_eq(rl_new_namespace(rl, &cfg->ns[i], err, sizeof(err)), 0, "%s", err);
	return rl;
}
