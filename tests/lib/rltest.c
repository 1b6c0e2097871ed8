/*
 * rltest.c - see rltest.h.
 */
#include "tests/lib/rltest.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

void rltest_ns_refused(const char *ns_json, const char *field, const char *what)
{
	char path[] = "/tmp/rltest-XXXXXX", json[1024];
	int fd = mkstemp(path);
	struct config c;
	struct config_err err;

	cr_assert(fd >= 0);
	snprintf(json, sizeof(json), "{\"namespaces\": [%s]}", ns_json);
	cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
	close(fd);
	config_defaults(&c);
	int rc = config_load(&c, path, &err);
	unlink(path);
	cr_assert_eq(rc, -1, "%s: accepted", ns_json);
	cr_assert_not_null(strstr(err.path, field), "%s: path %s, %s", ns_json, err.path, err.msg);
	cr_assert_not_null(strstr(err.msg, what), "%s: %s", ns_json, err.msg);
	config_free(&c);
}

int rltest_race(struct rl *rl, int ns, const char *key, int procs, int hits, double now,
		double limit)
{
	pid_t pid[16];
	int total = 0;

	cr_assert(procs > 0 && procs <= 16 && hits < 255);
	for (int p = 0; p < procs; p++) {
		pid[p] = fork();
		cr_assert_geq(pid[p], 0);
		if (pid[p] == 0) {
			struct rl_result res;
			int admitted = 0;
			for (int i = 0; i < hits; i++) {
				if (rl_hit(rl, ns, key, strlen(key), 1, 1, RL_WEIGHT_AUTO, now, limit,
					   true, &res) < 0)
					_exit(255);
				admitted += res.counted;
			}
			_exit(admitted);
		}
	}
	for (int p = 0; p < procs; p++) {
		int st;
		cr_assert_eq(waitpid(pid[p], &st, 0), pid[p]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 255, "child %d: %d", p, st);
		total += WEXITSTATUS(st);
	}
	return total;
}
