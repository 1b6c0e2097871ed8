/*
 * test_metrics.c - the metrics (agent/metrics.h) without a front: counts
 * made through the decision layer by two "workers" (slots of one shared
 * mapping, written from two processes) are summed in the Prometheus text;
 * every line of the text is well formed; the histogram is cumulative.
 */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/metrics.h"
#include "agent/metrics_page.h"
#include "agent/ratelimit.h"
#include "agent/shm.h"
#include "tests/lib/rltest.h"

static struct config cfg;
static struct rl *rl;
static struct metrics *m;
static char text[1 << 18];

static const char cfg_json[] =
	"{\"max_keys\": 64, \"peers\": {\"listen\": \"127.0.0.1:1\"}, \"namespaces\": ["
	"{\"name\": \"default\", \"window_sizes\": [60]},"
	"{\"name\": \"we\\\"ird\", \"window_sizes\": [60], \"max_keys\": 16, \"on_table_full\": \"deny\","
	" \"delay_max_ms\": 1000},"
	"{\"name\": \"synced\", \"window_sizes\": [60], \"sync_rate\": 1, \"strategy\": \"redis\"},"
	"{\"name\": \"nodes\", \"window_sizes\": [10],"
	" \"haproxy_tables\": {\"from\": \"req_local\", \"into\": \"req_cluster\"}}]}";

static void setup(void)
{
	char err[256];

	rl = rltest_new("test_metrics", cfg_json, &cfg);
	m = metrics_new(2, err, sizeof(err));
	cr_assert_not_null(m, "%s", err);
}

static void teardown(void)
{
	metrics_free(m);
	rl_free(rl);
	config_free(&cfg);
}

TestSuite(metrics, .init = setup, .fini = teardown);

/* n checks of key in ns from front, limit 3, as worker id. */
static void checks(int id, const char *ns, const char *key, int front, int n)
{
	struct decide d;

	metrics_attach(m, id);
	decide_init(&d, rl);
	for (int i = 0; i < n; i++) {
		struct rl_request rq = { .ns = ns, .ns_len = strlen(ns), .key = key,
					 .key_len = strlen(key), .window = 60, .cost = 1,
					 .has_limit = true, .limit = 3, .window_type = -1,
					 .front = front };
		struct rl_decision r;
		memset(&r, 0, sizeof(r));
		decide_one(&d, &rq, 6000010.0, &r);
	}
	decide_free(&d);
}

/* The value of the sample line that starts with line_start. */
static long long value(const char *line_start)
{
	char pat[256];

	snprintf(pat, sizeof(pat), "\n%s", line_start);
	const char *p = strstr(text, pat);

	cr_assert_not_null(p, "no line \"%s\" in\n%s", line_start, text);
	return strtoll(p + strlen(pat), NULL, 10);
}

Test(metrics, counts_summed_over_workers)
{
	/* Worker 1 in another process, as a forked worker writes. */
	pid_t pid = fork();
	if (pid == 0) {
		checks(1, "default", "a", FRONT_HTTP, 5);
		metrics_sync_cycle(0, true, 0.003);
		metrics_conn(FRONT_HTTP, 2);
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	checks(0, "default", "a", FRONT_SPOP, 2);
	checks(0, "default", "b", FRONT_SPOP, 1);
	metrics_sync_cycle(0, false, 0.2);
	metrics_sync_cycle(0, true, 7.0);
	struct rl_request bad = { .arg_error = "bad window", .front = FRONT_SPOP };
	struct decide d;
	struct rl_decision r;
	decide_init(&d, rl);
	decide_one(&d, &bad, 6000010.0, &r);
	decide_free(&d);

	long n = metrics_render(m, rl, text, sizeof(text));
	cr_assert_gt(n, 0);
	cr_assert_eq((size_t)n, strlen(text));
	cr_assert_eq(value("spoa_ratelimit_hits_total{namespace=\"default\",front=\"spop\"} "), 3);
	cr_assert_eq(value("spoa_ratelimit_hits_total{namespace=\"default\",front=\"http\"} "), 5);
	/* "a": 7 hits at a limit of 3 -> 4 exceeded. */
	cr_assert_eq(value("spoa_ratelimit_exceeded_total{namespace=\"default\"} "), 4);
	cr_assert_eq(value("spoa_ratelimit_errors_total{reason=\"bad_request\"} "), 1);
	cr_assert_eq(value("spoa_ratelimit_table_keys{namespace=\"default\"} "), 2);
	cr_assert_eq(value("spoa_ratelimit_table_capacity "), 64);
	cr_assert_eq(value("spoa_ratelimit_connections{front=\"http\"} "), 2);
	cr_assert_eq(value("spoa_ratelimit_sync_duration_seconds_bucket{le=\"0.005\"} "), 1);
	cr_assert_eq(value("spoa_ratelimit_sync_duration_seconds_bucket{le=\"0.25\"} "), 2);
	cr_assert_eq(value("spoa_ratelimit_sync_duration_seconds_bucket{le=\"5\"} "), 2);
	cr_assert_eq(value("spoa_ratelimit_sync_duration_seconds_bucket{le=\"+Inf\"} "), 3);
	cr_assert_eq(value("spoa_ratelimit_sync_duration_seconds_count "), 3);
	/* A label value with a quote is escaped. */
	cr_assert_not_null(strstr(text, "namespace=\"we\\\"ird\""), "%s", text);
}

Test(metrics, table_full_and_every_line_well_formed)
{
	char key[16];

	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		checks(0, "we\"ird", key, FRONT_SPOP, 1);
	}
	cr_assert_gt(metrics_render(m, rl, text, sizeof(text)), 0);
	cr_assert_gt(value("spoa_ratelimit_errors_total{reason=\"table_full\"} "), 0);
	cr_assert_gt(value("spoa_ratelimit_table_refused_total{namespace=\"we\\\"ird\"} "), 0);
	/* Refused under "deny": counted as exceeded too. */
	cr_assert_eq(value("spoa_ratelimit_exceeded_total{namespace=\"we\\\"ird\"} "),
		     value("spoa_ratelimit_errors_total{reason=\"table_full\"} "));

	regex_t sample, comment;
	cr_assert_eq(regcomp(&sample, "^spoa_ratelimit_[a-z_]+(\\{[a-z_]+=\"([^\"\\\\]|\\\\.)*\""
			     "(,[a-z_]+=\"([^\"\\\\]|\\\\.)*\")*\\})? [-+0-9.e]+(Inf)?$",
			     REG_EXTENDED | REG_NOSUB), 0);
	cr_assert_eq(regcomp(&comment, "^# (HELP|TYPE) spoa_ratelimit_[a-z_]+ .+$",
			     REG_EXTENDED | REG_NOSUB), 0);
	char *save = NULL, *copy = strdup(text);
	int lines = 0;
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++)
		cr_assert(regexec(&sample, l, 0, NULL, 0) == 0 || regexec(&comment, l, 0, NULL, 0) == 0,
			  "malformed line: %s", l);
	cr_assert_gt(lines, 40);
	free(copy);
	regfree(&sample);
	regfree(&comment);
}

/* table_keys never shows more than table_capacity: a namespace's count
 * in the table drifted past it (a process killed between a slot's CAS and
 * the count's update; the soak saw 20,001 of 20,000). */
Test(metrics, table_keys_never_above_capacity)
{
	struct shm_table *t = rl_shm(rl);
	unsigned sid = rl_shm_ns(rl, rl_namespace_index(rl, "default", 7));

	checks(0, "default", "a", FRONT_SPOP, 1);
	atomic_store(&t->hdr->live[sid], 65);
	cr_assert_gt(metrics_render(m, rl, text, sizeof(text)), 0);
	cr_assert_eq(value("spoa_ratelimit_table_capacity "), 64);
	cr_assert_eq(value("spoa_ratelimit_table_keys{namespace=\"default\"} "), 64);
}

Test(metrics, too_small_a_buffer_is_an_error)
{
	char small[64];

	cr_assert_eq(metrics_render(m, rl, small, sizeof(small)), -1);
}

/* Every family of the list (METRICS_FAMILIES) is on the page with its
 * HELP and TYPE lines, in the list's order, and has samples. */
Test(metrics, every_family_listed_in_order)
{
	const char *at = text;

	cr_assert_gt(metrics_render(m, rl, text, sizeof(text)), 0);
	for (int f = 0; f < METRICS_FAM_COUNT; f++) {
		char help[96], type[96], sample[96];
		const char *name = metrics_family_name((enum metrics_family)f);

		snprintf(help, sizeof(help), "# HELP spoa_ratelimit_%s ", name);
		snprintf(type, sizeof(type), "# TYPE spoa_ratelimit_%s ", name);
		snprintf(sample, sizeof(sample), "\nspoa_ratelimit_%s", name);
		const char *h = strstr(at, help);
		cr_assert_not_null(h, "%s missing or out of order", help);
		cr_assert_not_null(strstr(h, type), "%s", type);
		cr_assert_not_null(strstr(h, sample), "no sample of %s", name);
		at = h + 1;
	}
	cr_assert_null(metrics_family_name(METRICS_FAM_COUNT));
}
