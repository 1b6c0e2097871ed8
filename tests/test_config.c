/*
 * test_config.c - configuration parsing: the defaults, a full file into
 * every field, every kind of invalid file (each must fail with the right
 * JSON path and message and leave the config untouched), config_check()
 * after command-line overrides, namespace lookup, strategy_opts ownership
 * (runs under ASan's leak checker) and error formatting.
 */
#include "agent/config.h"
#include "agent/log.h"
#include "spop/spop-t.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

static char file_path[64];

/* Criterion does not fail a test whose process LeakSanitizer flags at
 * exit, so tests that allocate check for leaks themselves. */
static void assert_no_leaks(void)
{
#if defined(__SANITIZE_ADDRESS__)
	cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,
		     "memory leaked (see the LeakSanitizer report above)");
#endif
}

/* Writes json to a fresh temporary file, named in file_path. */
static void write_file(const char *json)
{
	int fd;
	size_t len = strlen(json);

	snprintf(file_path, sizeof(file_path), "/tmp/test_config_XXXXXX.json");
	fd = mkstemps(file_path, 5);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, json, len), (ssize_t)len);
	close(fd);
}

/* config_load() of json over c. */
static int load(struct config *c, struct config_err *err, const char *json)
{
	int rc;

	write_file(json);
	rc = config_load(c, file_path, err);
	unlink(file_path);
	return rc;
}

static void assert_defaults(const struct config *c)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	cr_assert_str_eq(c->listen, "127.0.0.1:12345");
	cr_assert_eq(c->workers, cpus > 64 ? 64 : cpus < 1 ? 1 : cpus);
	cr_assert_eq(c->max_keys, 65536);
	cr_assert_str_eq(c->message_prefix, "ratelimit");
	cr_assert_eq(c->var_scope, SPOP_SCOPE_TXN);
	cr_assert_eq(c->max_frame_size, 16380);
	cr_assert_eq(c->max_connections, 10000);
	cr_assert_eq(c->idle_timeout_ms, 60000);
	cr_assert_eq(c->frame_timeout_ms, 5000);
	cr_assert_eq(c->log_level, LOG_INFO);
	cr_assert(config_sched_batch(c, false), "local counting: workers run SCHED_BATCH");
	cr_assert_eq(config_collect_us(c, false), 20);
	cr_assert_not(config_sched_batch(c, true), "but not behind HAProxy 2.x alone");
	cr_assert_eq(config_collect_us(c, true), 0);
	cr_assert_eq(c->n_ns, 1);
	cr_assert_str_eq(c->ns[0].name, "default");
	cr_assert_eq(c->ns[0].n_window_sizes, 3);
	cr_assert_eq(c->ns[0].window_sizes[0], 1);
	cr_assert_eq(c->ns[0].window_sizes[1], 60);
	cr_assert_eq(c->ns[0].window_sizes[2], 3600);
	cr_assert_eq(c->ns[0].sync_rate, -1);
	cr_assert_str_eq(c->ns[0].strategy, "local");
	cr_assert_null(c->ns[0].strategy_opts);
	cr_assert_eq(c->ns[0].window_type, NS_WINDOW_SLIDING);
	cr_assert(c->ns[0].count_denied);
}

Test(config, defaults)
{
	struct config c;
	struct config_err err;

	memset(&c, 0xa5, sizeof(c));
	config_defaults(&c);
	assert_defaults(&c);
	cr_assert_eq(config_check(&c, &err), 0, "%s: %s", err.path, err.msg);
	config_free(&c);
	config_free(&c);
	assert_defaults(&c);
}

Test(config, default_workers)
{
	int n = config_default_workers();

	cr_assert(n >= 1 && n <= 64);
}

static const char full_file[] =
	"{\n"
	"  \"listen\": \"[::1]:9000\",\n"
	"  \"workers\": 3,\n"
	"  \"max_keys\": 1000000,\n"
	"  \"message_prefix\": \"rl.v2-x_\",\n"
	"  \"var_scope\": \"sess\",\n"
	"  \"max_frame_size\": 65536,\n"
	"  \"max_connections\": 500,\n"
	"  \"idle_timeout_ms\": 30000,\n"
	"  \"frame_timeout_ms\": 1500,\n"
	"  \"log_level\": \"debug\",\n"
	"  \"key_secret\": \"0123456789abcdef-shared\",\n"
	"  \"namespaces\": [\n"
	"    { \"name\": \"default\", \"window_sizes\": [1, 60, 3600], \"sync_rate\": -1,\n"
	"      \"strategy\": \"local\" },\n"
	"    { \"name\": \"api\", \"window_sizes\": [60], \"window_type\": \"fixed\",\n"
	"      \"count_denied\": false, \"max_keys\": 600000, \"on_table_full\": \"deny\" },\n"
	"    { \"name\": \"shared\", \"window_sizes\": [10, 31536000, 5], \"sync_rate\": 0.25,\n"
	"      \"strategy\": \"redis\",\n"
	"      \"strategy_opts\": { \"host\": \"127.0.0.1\", \"port\": 6379, \"db\": 2 } },\n"
	"    { \"name\": \"pg\", \"window_sizes\": [1,2,3,4,5,6,7,8], \"sync_rate\": 0,\n"
	"      \"strategy\": \"postgres\", \"strategy_opts\": {} }\n"
	"  ]\n"
	"}\n";

Test(config, full_file)
{
	struct config c;
	struct config_err err;
	size_t i;

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, full_file), 0, "%s: %s", err.path, err.msg);
	cr_assert_str_eq(c.listen, "[::1]:9000");
	cr_assert_eq(c.workers, 3);
	cr_assert_eq(c.max_keys, 1000000);
	cr_assert_str_eq(c.message_prefix, "rl.v2-x_");
	cr_assert_eq(c.var_scope, SPOP_SCOPE_SESS);
	cr_assert_eq(c.max_frame_size, 65536);
	cr_assert_eq(c.max_connections, 500);
	cr_assert_eq(c.idle_timeout_ms, 30000);
	cr_assert_eq(c.frame_timeout_ms, 1500);
	cr_assert_eq(c.log_level, LOG_DEBUG);
	cr_assert_eq(c.n_ns, 4);

	cr_assert_str_eq(c.ns[0].name, "default");
	cr_assert_eq(c.ns[0].n_window_sizes, 3);
	cr_assert_eq(c.ns[0].window_sizes[2], 3600);
	cr_assert_eq(c.ns[0].sync_rate, -1);
	cr_assert_str_eq(c.ns[0].strategy, "local");
	cr_assert_null(c.ns[0].strategy_opts);
	cr_assert_eq(c.ns[0].window_type, NS_WINDOW_SLIDING);
	cr_assert(c.ns[0].count_denied);

	cr_assert_str_eq(c.ns[1].name, "api");
	cr_assert_eq(c.ns[1].n_window_sizes, 1);
	cr_assert_eq(c.ns[1].window_sizes[0], 60);
	cr_assert_eq(c.ns[1].sync_rate, -1);
	cr_assert_str_eq(c.ns[1].strategy, "local");
	cr_assert_eq(c.ns[1].window_type, NS_WINDOW_FIXED);
	cr_assert_not(c.ns[1].count_denied);
	cr_assert_eq(c.ns[1].max_keys, 600000);
	cr_assert_eq(c.ns[1].on_table_full, NS_FULL_DENY);
	cr_assert_eq(c.ns[0].max_keys, 0);
	cr_assert_eq(c.ns[0].on_table_full, NS_FULL_EVICT);
	cr_assert_str_eq(c.key_secret, "0123456789abcdef-shared");

	cr_assert_str_eq(c.ns[2].name, "shared");
	cr_assert_eq(c.ns[2].n_window_sizes, 3);
	cr_assert_eq(c.ns[2].window_sizes[0], 10);
	cr_assert_eq(c.ns[2].window_sizes[1], 31536000);
	cr_assert_eq(c.ns[2].window_sizes[2], 5);
	cr_assert_eq(c.ns[2].sync_rate, 0.25);
	cr_assert_str_eq(c.ns[2].strategy, "redis");
	cr_assert_str_eq(c.ns[2].strategy_opts, "{\"host\":\"127.0.0.1\",\"port\":6379,\"db\":2}");

	cr_assert_str_eq(c.ns[3].name, "pg");
	cr_assert_eq(c.ns[3].n_window_sizes, 8);
	for (i = 0; i < 8; i++)
		cr_assert_eq(c.ns[3].window_sizes[i], i + 1);
	cr_assert_eq(c.ns[3].sync_rate, 0);
	cr_assert_str_eq(c.ns[3].strategy, "postgres");
	cr_assert_str_eq(c.ns[3].strategy_opts, "{}");

	cr_assert_eq(config_check(&c, &err), 0, "%s: %s", err.path, err.msg);
	config_free(&c);
	for (i = 0; i < c.n_ns; i++)
		cr_assert_null(c.ns[i].strategy_opts);
	assert_no_leaks();
}

Test(config, example_file)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(config_load(&c, "haproxy-examples/agent.json", &err), 0, "%s: %s: %s",
		     err.file, err.path, err.msg);
	cr_assert_eq(c.n_ns, 2);
	cr_assert_str_eq(c.ns[0].name, "default");
	cr_assert_eq(c.ns[0].n_window_sizes, 3);
	cr_assert_str_eq(c.ns[0].strategy, "local");
	cr_assert_str_eq(c.ns[1].name, "api");
	cr_assert_eq(c.ns[1].n_window_sizes, 1);
	cr_assert_eq(c.ns[1].window_sizes[0], 60);
	cr_assert_eq(c.ns[1].window_type, NS_WINDOW_SLIDING);
	config_free(&c);
	assert_no_leaks();
}

Test(config, empty_object_keeps_defaults)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{}"), 0, "%s: %s", err.path, err.msg);
	assert_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": []}"), 0, "%s: %s", err.path, err.msg);
	assert_defaults(&c);
	config_free(&c);
}

Test(config, keys_absent_keep_previous_values)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"max_keys\": 100}"), 0, "%s: %s", err.path, err.msg);
	cr_assert_eq(c.max_keys, 100);
	cr_assert_str_eq(c.listen, "127.0.0.1:12345");
	cr_assert_eq(c.n_ns, 1);
	config_free(&c);
}

Test(config, namespace_defaults)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": [{\"window_sizes\": [30]}]}"), 0, "%s: %s",
		     err.path, err.msg);
	cr_assert_eq(c.n_ns, 1);
	cr_assert_str_eq(c.ns[0].name, "default");
	cr_assert_eq(c.ns[0].n_window_sizes, 1);
	cr_assert_eq(c.ns[0].window_sizes[0], 30);
	cr_assert_eq(c.ns[0].sync_rate, -1);
	cr_assert_str_eq(c.ns[0].strategy, "local");
	cr_assert_null(c.ns[0].strategy_opts);
	cr_assert_eq(c.ns[0].window_type, NS_WINDOW_SLIDING);
	cr_assert(c.ns[0].count_denied);
	config_free(&c);
	assert_no_leaks();
}

Test(config, namespaces_replace_default)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": [{\"name\": \"api\", \"window_sizes\": [60]}]}"),
		     0, "%s: %s", err.path, err.msg);
	cr_assert_eq(c.n_ns, 1);
	cr_assert_eq(config_ns_find(&c, "default", 7), -1);
	cr_assert_eq(config_ns_find(&c, "api", 3), 0);
	config_free(&c);
}

Test(config, workers_zero_means_cpus)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	c.workers = 99;   /* overwritten by the file */
	cr_assert_eq(load(&c, &err, "{\"workers\": 0}"), 0, "%s: %s", err.path, err.msg);
	cr_assert_eq(c.workers, config_default_workers());
	config_free(&c);
}

Test(config, listen_forms)
{
	static const char *const good[] = {
		"127.0.0.1:12345", "0.0.0.0:1", "localhost:65535", "my-host.example.com:80",
		"[::1]:12345", "[::]:8080", "[fe80::1:2]:9", "unix:/run/spoa.sock", "/tmp/x.sock",
		"unix:relative.sock", ":12345", "*:12345",
	};
	struct config c;
	struct config_err err;
	char json[512];
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		config_defaults(&c);
		snprintf(json, sizeof(json), "{\"listen\": \"%s\"}", good[i]);
		cr_expect_eq(load(&c, &err, json), 0, "%s: %s: %s", good[i], err.path, err.msg);
		cr_expect_str_eq(c.listen, good[i]);
		config_free(&c);
	}
	assert_no_leaks();
}

struct bad_case {
	const char *json;
	const char *path;
	const char *msg;      /* a substring of the message */
};

/* Each case must fail with exactly that path, a message containing msg,
 * the file named, and the config left as it was. */
static void expect_errors(const struct bad_case *cases, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct config c;
		struct config_err err;
		int rc;

		config_defaults(&c);
		memset(&err, 0x5a, sizeof(err));
		rc = load(&c, &err, cases[i].json);
		cr_expect_eq(rc, -1, "case %zu %s: accepted", i, cases[i].json);
		if (rc != -1)
			continue;
		cr_expect_str_eq(err.file, file_path, "case %zu", i);
		cr_expect_str_eq(err.path, cases[i].path, "case %zu %s: path \"%s\", msg \"%s\"", i,
				 cases[i].json, err.path, err.msg);
		cr_expect_not_null(strstr(err.msg, cases[i].msg),
				   "case %zu %s: msg \"%s\" lacks \"%s\"", i, cases[i].json, err.msg,
				   cases[i].msg);
		assert_defaults(&c);
		config_free(&c);
	}
}

#define EXPECT_ERRORS(cases) expect_errors((cases), sizeof(cases) / sizeof((cases)[0]))

Test(config, wrong_types)
{
	static const struct bad_case cases[] = {
		{ "[]", "(top level)", "expected an object, got an array" },
		{ "{\"listen\": 5}", "listen", "got integer 5" },
		{ "{\"workers\": \"4\"}", "workers", "expected an integer in 0..64, got string \"4\"" },
		{ "{\"workers\": 4.0}", "workers", "got real 4" },
		{ "{\"max_keys\": null}", "max_keys", "expected an integer in 16..67108864, got null" },
		{ "{\"namespaces\": {}}", "namespaces", "expected an array of namespace objects, got an object" },
		{ "{\"message_prefix\": 1}", "message_prefix", "got integer 1" },
		{ "{\"var_scope\": true}", "var_scope",
		  "expected one of \"proc\", \"sess\", \"txn\", \"req\" or \"res\", got true" },
		{ "{\"max_frame_size\": \"x\"}", "max_frame_size", "got string \"x\"" },
		{ "{\"max_connections\": false}", "max_connections", "got false" },
		{ "{\"idle_timeout_ms\": []}", "idle_timeout_ms", "got an array" },
		{ "{\"frame_timeout_ms\": {}}", "frame_timeout_ms", "got an object" },
		{ "{\"log_level\": 3}", "log_level",
		  "expected one of \"err\", \"warn\", \"info\" or \"debug\", got integer 3" },
		{ "{\"namespaces\": [\"default\"]}", "namespaces[0]", "expected an object, got string \"default\"" },
		{ "{\"namespaces\": [{\"name\": 1, \"window_sizes\": [1]}]}", "namespaces[0].name",
		  "got integer 1" },
		{ "{\"namespaces\": [{\"window_sizes\": \"60\"}]}", "namespaces[0].window_sizes",
		  "expected an array of window sizes (positive integers, seconds), got string \"60\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [\"60\"]}]}", "namespaces[0].window_sizes[0]",
		  "expected a positive integer (seconds), got string \"60\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1.5]}]}", "namespaces[0].window_sizes[0]",
		  "got real 1.5" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": \"1\"}]}",
		  "namespaces[0].sync_rate", "expected a number" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"strategy\": 1}]}", "namespaces[0].strategy",
		  "expected one of \"local\", \"redis\" or \"postgres\", got integer 1" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"strategy_opts\": \"x\"}]}",
		  "namespaces[0].strategy_opts", "expected an object, got string \"x\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"strategy_opts\": null}]}",
		  "namespaces[0].strategy_opts", "expected an object, got null" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"window_type\": 0}]}",
		  "namespaces[0].window_type", "expected one of \"sliding\" or \"fixed\", got integer 0" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"count_denied\": \"yes\"}]}",
		  "namespaces[0].count_denied", "expected true or false, got string \"yes\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"max_keys\": \"10\"}]}",
		  "namespaces[0].max_keys", "expected an integer in 1..67108864, got string \"10\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"on_table_full\": 1}]}",
		  "namespaces[0].on_table_full",
		  "expected one of \"evict\", \"deny\" or \"allow\", got integer 1" },
		{ "{\"max_buffer_memory\": \"1G\"}", "max_buffer_memory",
		  "expected an integer in 1048576..68719476736, got string \"1G\"" },
		{ "{\"key_secret\": 12345678901234567}", "key_secret",
		  "expected a string of 16..255 bytes, got integer" },
	};

	EXPECT_ERRORS(cases);
	assert_no_leaks();
}

Test(config, bad_values)
{
	static const struct bad_case cases[] = {
		{ "{\"workers\": -1}", "workers", "expected an integer in 0..64, got -1" },
		{ "{\"workers\": 65}", "workers", "got 65" },
		{ "{\"max_keys\": 15}", "max_keys", "expected an integer in 16..67108864, got 15" },
		{ "{\"max_keys\": 67108865}", "max_keys", "got 67108865" },
		{ "{\"message_prefix\": \"\"}", "message_prefix", "1..31 characters of [A-Za-z0-9_.-]" },
		{ "{\"message_prefix\": \"rate limit\"}", "message_prefix", "got string \"rate limit\"" },
		{ "{\"message_prefix\": \"abcdefghijabcdefghijabcdefghijab\"}", "message_prefix",
		  "1..31 characters" },
		{ "{\"var_scope\": \"transaction\"}", "var_scope", "got string \"transaction\"" },
		{ "{\"var_scope\": \"TXN\"}", "var_scope", "got string \"TXN\"" },
		{ "{\"max_frame_size\": 255}", "max_frame_size", "expected an integer in 256..1048576, got 255" },
		{ "{\"max_frame_size\": 1048577}", "max_frame_size", "got 1048577" },
		{ "{\"max_connections\": 0}", "max_connections", "expected an integer in 1..1000000, got 0" },
		{ "{\"idle_timeout_ms\": 0}", "idle_timeout_ms", "expected an integer in 1..86400000, got 0" },
		{ "{\"frame_timeout_ms\": -5}", "frame_timeout_ms", "got -5" },
		{ "{\"log_level\": \"trace\"}", "log_level", "got string \"trace\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [60]}, {\"window_sizes\": [-5]}]}",
		  "namespaces[1].window_sizes[0]", "expected a positive integer (seconds), got -5" },
		{ "{\"namespaces\": [{\"window_sizes\": [1, 0]}]}", "namespaces[0].window_sizes[1]",
		  "expected a positive integer (seconds), got 0" },
		{ "{\"namespaces\": [{\"window_sizes\": [31536001]}]}", "namespaces[0].window_sizes[0]",
		  "expected at most 31536000 seconds (365 days), got 31536001" },
		{ "{\"namespaces\": [{\"window_sizes\": [99999999999999]}]}", "namespaces[0].window_sizes[0]",
		  "got 99999999999999" },
		{ "{\"namespaces\": [{\"window_sizes\": [60, 1, 60]}]}", "namespaces[0].window_sizes[2]",
		  "duplicate window size 60 (also window_sizes[0])" },
		{ "{\"namespaces\": [{\"window_sizes\": []}]}", "namespaces[0].window_sizes",
		  "expected 1..8 window sizes, got none" },
		{ "{\"namespaces\": [{\"window_sizes\": [1,2,3,4,5,6,7,8,9]}]}", "namespaces[0].window_sizes",
		  "expected at most 8 window sizes, got 9" },
		{ "{\"namespaces\": [{\"name\": \"api\"}]}", "namespaces[0].window_sizes",
		  "missing: expected 1..8 window sizes" },
		{ "{\"namespaces\": [{\"name\": \"\", \"window_sizes\": [1]}]}", "namespaces[0].name",
		  "expected a name of 1..63 characters" },
		{ "{\"namespaces\": [{\"name\": \"a\\tb\", \"window_sizes\": [1]}]}", "namespaces[0].name",
		  "no control characters, got string \"a?b\"" },
		{ "{\"namespaces\": [{\"name\": \"0123456789012345678901234567890123456789012345678901234567890123\","
		  " \"window_sizes\": [1]}]}", "namespaces[0].name", "1..63 characters" },
		{ "{\"namespaces\": [{\"name\": \"api\", \"window_sizes\": [1]},"
		  " {\"name\": \"web\", \"window_sizes\": [1]}, {\"name\": \"api\", \"window_sizes\": [2]}]}",
		  "namespaces[2].name", "duplicate namespace \"api\" (also namespaces[0])" },
		{ "{\"namespaces\": [{\"window_sizes\": [1]}, {\"window_sizes\": [2]}]}", "namespaces[1].name",
		  "duplicate namespace \"default\" (also namespaces[0])" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"strategy\": \"memcached\"}]}",
		  "namespaces[0].strategy", "got string \"memcached\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"strategy\": \"redis\"}]}",
		  "namespaces[0].strategy", "expected \"local\" since sync_rate is -1 (< 0: local only), got \"redis\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": -0.5, \"strategy\": \"postgres\"}]}",
		  "namespaces[0].strategy", "since sync_rate is -0.5" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 0}]}", "namespaces[0].strategy",
		  "missing: sync_rate 0 (>= 0: shared counters) needs \"redis\" or \"postgres\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 2, \"strategy\": \"local\"}]}",
		  "namespaces[0].strategy", "expected \"redis\" or \"postgres\" since sync_rate is 2" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"window_type\": \"rolling\"}]}",
		  "namespaces[0].window_type", "got string \"rolling\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"max_keys\": 0}]}",
		  "namespaces[0].max_keys", "expected an integer in 1..67108864, got 0" },
		{ "{\"max_keys\": 100, \"namespaces\": [{\"name\": \"a\", \"window_sizes\": [1],"
		  " \"max_keys\": 60}, {\"name\": \"b\", \"window_sizes\": [1], \"max_keys\": 41}]}",
		  "namespaces[1].max_keys", "add up to more than the top-level max_keys (100)" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"on_table_full\": \"drop\"}]}",
		  "namespaces[0].on_table_full", "got string \"drop\"" },
		{ "{\"max_buffer_memory\": 1048575}", "max_buffer_memory", "got 1048575" },
		{ "{\"key_secret\": \"short\"}", "key_secret",
		  "expected a string of 16..255 bytes without NUL, got 5 bytes" },
	};

	EXPECT_ERRORS(cases);
	assert_no_leaks();
}

Test(config, too_many_namespaces)
{
	static const struct bad_case cases[1] = {
		{ NULL, "namespaces", "expected at most 32 namespaces, got 33" },
	};
	struct bad_case bc = cases[0];
	char json[4096];
	size_t o, i;

	o = (size_t)snprintf(json, sizeof(json), "{\"namespaces\": [");
	for (i = 0; i < 33; i++)
		o += (size_t)snprintf(json + o, sizeof(json) - o, "%s{\"name\": \"n%zu\", \"window_sizes\": [1]}",
				      i ? "," : "", i);
	snprintf(json + o, sizeof(json) - o, "]}");
	bc.json = json;
	expect_errors(&bc, 1);

	/* 32 is fine */
	{
		struct config c;
		struct config_err err;

		o = (size_t)snprintf(json, sizeof(json), "{\"namespaces\": [");
		for (i = 0; i < 32; i++)
			o += (size_t)snprintf(json + o, sizeof(json) - o,
					      "%s{\"name\": \"n%zu\", \"window_sizes\": [1]}", i ? "," : "", i);
		snprintf(json + o, sizeof(json) - o, "]}");
		config_defaults(&c);
		cr_assert_eq(load(&c, &err, json), 0, "%s: %s", err.path, err.msg);
		cr_assert_eq(c.n_ns, 32);
		cr_assert_eq(config_ns_find(&c, "n31", 3), 31);
		config_free(&c);
	}
	assert_no_leaks();
}

Test(config, unknown_keys)
{
	static const struct bad_case cases[] = {
		{ "{\"listn\": \"127.0.0.1:1\"}", "listn", "unknown key \"listn\" (did you mean \"listen\"?)" },
		{ "{\"namespace\": []}", "namespace", "unknown key \"namespace\" (did you mean \"namespaces\"?)" },
		{ "{\"colour\": 1}", "colour", "unknown key \"colour\"; known keys: listen, http_listen, grpc_listen, workers," },
		{ "{\"colour\": 1}", "colour", ", max_buffer_memory, listen_mode, listen_owner" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"windw_sizes\": [2]}]}",
		  "namespaces[0].windw_sizes", "unknown key \"windw_sizes\" (did you mean \"window_sizes\"?)" },
		{ "{\"namespaces\": [{\"window_sizes\": [1]}, {\"window_sizes\": [2], \"name\": \"x\", \"limits\": 5}]}",
		  "namespaces[1].limits", "unknown key \"limits\" (did you mean \"limit\"?)" },
		{ "{\"namespaces\": [{\"window_sizes\": [1]}, {\"window_sizes\": [2], \"name\": \"x\", \"quota\": 5}]}",
		  "namespaces[1].quota", "unknown key \"quota\"; known keys: name, window_sizes, sync_rate" },
		/* strategy_opts are the store's to check (its check_opts) */
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 1, \"strategy\": \"redis\","
		  " \"strategy_opts\": {\"hots\": \"x\"}}]}",
		  "namespaces[0].strategy_opts", "hots: unknown option (known: host, port," },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 1, \"strategy\": \"postgres\","
		  " \"strategy_opts\": {\"pool_size\": 0}}]}",
		  "namespaces[0].strategy_opts", "pool_size: expected an integer from 1 to" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 0.001, \"strategy\": \"redis\"}]}",
		  "namespaces[0].sync_rate", "expected < 0 (local only), 0 (synchronous) or 0.01 to 3600 seconds, got 0.001" },
	};

	EXPECT_ERRORS(cases);
	assert_no_leaks();
}

Test(config, listen_bad_forms)
{
	static const struct bad_case cases[] = {
		{ "{\"listen\": \"\"}", "listen", ": empty" },
		{ "{\"listen\": \"127.0.0.1\"}", "listen", "got \"127.0.0.1\": missing ':PORT'" },
		{ "{\"listen\": \"127.0.0.1:\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"127.0.0.1:0\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"127.0.0.1:65536\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"127.0.0.1:123456\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"127.0.0.1:-1\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"127.0.0.1:80x\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"**:12345\"}", "listen", "bad host name" },
		{ "{\"listen\": \"*\"}", "listen", "missing ':PORT'" },
		{ "{\"listen\": \"300.0.0.1:80\"}", "listen", "bad IPv4 address" },
		{ "{\"listen\": \"1.2.3:80\"}", "listen", "bad IPv4 address" },
		{ "{\"listen\": \"bad_host:80\"}", "listen", "bad host name" },
		{ "{\"listen\": \"::1:12345\"}", "listen", "an IPv6 address needs brackets" },
		{ "{\"listen\": \"[::1]\"}", "listen", "missing ':PORT' after ']'" },
		{ "{\"listen\": \"[::1:80\"}", "listen", "missing ']'" },
		{ "{\"listen\": \"[]:80\"}", "listen", "bad IPv6 address" },
		{ "{\"listen\": \"[::g]:80\"}", "listen", "bad IPv6 address" },
		{ "{\"listen\": \"[::1]:0\"}", "listen", "port must be 1..65535" },
		{ "{\"listen\": \"unix:\"}", "listen", "empty socket path" },
		{ "{\"listen\": \"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
		  "listen", "socket path longer than 107 bytes" },
	};

	EXPECT_ERRORS(cases);
	assert_no_leaks();
}

Test(config, listen_mode_and_owner)
{
	static const struct { const char *mode; int want; } modes[] = {
		{ "0660", 0660 }, { "660", 0660 }, { "0600", 0600 }, { "0777", 0777 },
		{ "000", 0 }, { "0000", 0 },
	};
	static const char *const owners[] = {
		"haproxy", "haproxy:haproxy", ":haproxy", "0", "0:0", "www-data:adm", "svc$",
		"a.b_c-d",
	};
	struct config c;
	struct config_err err;
	char json[512];
	size_t i;

	config_defaults(&c);
	cr_assert_eq(c.listen_mode, -1);
	cr_assert_str_empty(c.listen_owner);
	config_free(&c);
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		config_defaults(&c);
		snprintf(json, sizeof(json),
			 "{\"listen_mode\": \"%s\", \"listen\": \"unix:/run/x.sock\"}",
			 modes[i].mode);
		cr_expect_eq(load(&c, &err, json), 0, "%s: %s: %s", modes[i].mode, err.path, err.msg);
		cr_expect_eq(c.listen_mode, modes[i].want, "%s: %o", modes[i].mode, c.listen_mode);
		config_free(&c);
	}
	for (i = 0; i < sizeof(owners) / sizeof(owners[0]); i++) {
		config_defaults(&c);
		snprintf(json, sizeof(json),
			 "{\"listen\": \"/run/x.sock\", \"listen_owner\": \"%s\"}", owners[i]);
		cr_expect_eq(load(&c, &err, json), 0, "%s: %s: %s", owners[i], err.path, err.msg);
		cr_expect_str_eq(c.listen_owner, owners[i]);
		config_free(&c);
	}
	assert_no_leaks();
}

Test(config, listen_mode_and_owner_bad)
{
	static const struct bad_case cases[] = {
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": 660}", "listen_mode",
		  "expected an octal string \"0000\"..\"0777\" such as \"0660\", got integer 660" },
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": \"0668\"}", "listen_mode", "got string \"0668\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": \"4755\"}", "listen_mode", "got string \"4755\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": \"66\"}", "listen_mode", "got string \"66\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": \"06600\"}", "listen_mode", "got string \"06600\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": \"-660\"}", "listen_mode", "got string \"-660\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_mode\": \"\"}", "listen_mode", "got string \"\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \"\"}", "listen_owner", "USER:GROUP" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \"a:\"}", "listen_owner", "got string \"a:\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \":\"}", "listen_owner", "got string \":\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \"a:b:c\"}", "listen_owner", "got string \"a:b:c\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \"-rf\"}", "listen_owner", "got string \"-rf\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \"a b\"}", "listen_owner", "got string \"a b\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": \"a$b\"}", "listen_owner", "got string \"a$b\"" },
		{ "{\"listen\": \"unix:/x\", \"listen_owner\": 0}", "listen_owner", "got integer 0" },
		{ "{\"listen_mode\": \"0660\"}", "listen_mode",
		  "applies to a unix socket only, but listen is \"127.0.0.1:12345\"" },
		{ "{\"listen_owner\": \"haproxy\", \"listen\": \"[::1]:9\"}", "listen_owner",
		  "applies to a unix socket only, but listen is \"[::1]:9\"" },
		{ "{\"listen_mode\": \"0660\", \"http_listen\": \"127.0.0.1:8081\"}", "listen_mode",
		  "and http_listen is not one either" },
	};
	struct config c;
	struct config_err err;

	/* The HTTP front on a unix socket takes them too (nginx's
	 * proxy_pass http://unix:...). */
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"http_listen\": \"unix:/run/rl-http.sock\","
				    " \"listen_mode\": \"0660\", \"listen_owner\": \":www-data\"}"), 0,
		     "%s: %s", err.path, err.msg);
	cr_assert_eq(c.listen_mode, 0660);
	config_free(&c);
	EXPECT_ERRORS(cases);
	assert_no_leaks();
}

Test(config, http_front_keys)
{
	static const struct bad_case cases[] = {
		{ "{\"http_listen\": 8080}", "http_listen", "got integer 8080" },
		{ "{\"http_listen\": \"127.0.0.1\"}", "http_listen", "missing ':PORT'" },
		{ "{\"http_listen\": \"127.0.0.1:12345\"}", "http_listen",
		  "the same address as listen" },
		{ "{\"http_deny_status\": 200}", "http_deny_status", "expected an integer in 400..599" },
		{ "{\"http_deny_status\": 600}", "http_deny_status", "expected an integer in 400..599" },
		{ "{\"http_deny_status\": \"429\"}", "http_deny_status", "got string" },
	};
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_str_empty(c.http_listen, "off by default");
	cr_assert_eq(c.http_deny_status, 429);
	cr_assert_eq(load(&c, &err, "{\"http_listen\": \"[::1]:8080\", \"http_deny_status\": 403}"),
		     0, "%s: %s", err.path, err.msg);
	cr_assert_str_eq(c.http_listen, "[::1]:8080");
	cr_assert_eq(c.http_deny_status, 403);
	config_free(&c);
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"http_listen\": \"unix:/run/rl-http.sock\"}"), 0, "%s",
		     err.msg);
	config_free(&c);
	EXPECT_ERRORS(cases);
	assert_no_leaks();
}

/* A document setting the JSON path key ("listen", or "peers.listen":
 * "listen" inside "peers") to the string value. */
static void address_json(char *json, size_t cap, const char *key, const char *value)
{
	const char *dot = strchr(key, '.');

	if (!dot)
		snprintf(json, cap, "{\"%s\": \"%s\"}", key, value);
	else
		snprintf(json, cap, "{\"%.*s\": {\"%s\": \"%s\"}}", (int)(dot - key), key, dot + 1,
			 value);
}

/* Every front of agent/fronts.h has its address key, read and checked
 * as listen is: set, it is the front's address (config_front_address); a
 * bad one or one another front has is refused at its own key (a JSON
 * path: "peers.listen" is "listen" inside "peers", and nowhere else).
 * Adding a front's line gives it all this. */
Test(config, every_front_has_its_address_key)
{
	struct config c;
	struct config_err err;
	char json[CONFIG_ADDR_MAX + 64], addr[32];

	for (int f = 0; f < FRONT_COUNT; f++) {
		const char *key = front_address_key((enum front_id)f);
		config_defaults(&c);
		cr_assert_str_empty(f == FRONT_SPOP ? "" : config_front_address(&c, (enum front_id)f),
				    "%s: off by default", key);
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", f == FRONT_SPOP ? 1 : 20000 + f);
		address_json(json, sizeof(json), key, addr);
		cr_assert_eq(load(&c, &err, json), 0, "%s: %s: %s", key, err.path, err.msg);
		cr_assert_str_eq(config_front_address(&c, (enum front_id)f), addr, "%s", key);
		config_free(&c);
		config_defaults(&c);
		address_json(json, sizeof(json), key, "127.0.0.1");
		cr_assert_eq(load(&c, &err, json), -1, "%s", key);
		cr_assert_str_eq(err.path, key);
		config_free(&c);
		if (strchr(key, '.')) {
			/* Only where its path says: not a top-level key. */
			config_defaults(&c);
			snprintf(json, sizeof(json), "{\"%s\": \"%s\"}", key, addr);
			cr_assert_eq(load(&c, &err, json), -1, "%s", key);
			const char *known = strstr(err.msg, "known keys: ");
			cr_assert_not_null(known, "%s", err.msg);
			cr_assert_null(strstr(known, key), "%s: not offered at the top: %s", key,
				       err.msg);
			config_free(&c);
		}
		if (f == FRONT_SPOP)
			continue;
		config_defaults(&c);
		address_json(json, sizeof(json), key, c.listen);
		cr_assert_eq(load(&c, &err, json), -1, "%s", key);
		cr_assert_str_eq(err.path, key);
		cr_assert_str_eq(err.msg, "the same address as listen");
		config_free(&c);
	}
	assert_no_leaks();
}

Test(config, syntax_error_has_line_and_column)
{
	struct config c;
	struct config_err err;
	char line[600];

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\n  \"listen\": \"127.0.0.1:1\",\n  \"workers\": ,\n}\n"), -1);
	cr_assert_eq(strncmp(err.path, "line 3, column ", 15), 0, "%s", err.path);
	cr_assert_str_neq(err.msg, "");
	config_err_format(&err, line, sizeof(line));
	cr_assert_eq(strncmp(line, file_path, strlen(file_path)), 0, "%s", line);
	cr_assert_not_null(strstr(line, ": line 3, column "), "%s", line);
	assert_defaults(&c);

	cr_assert_eq(load(&c, &err, ""), -1);
	cr_assert_eq(strncmp(err.path, "line ", 5), 0, "%s", err.path);

	cr_assert_eq(load(&c, &err, "{\"workers\": 1, \"workers\": 2}"), -1);
	cr_assert_eq(strncmp(err.path, "line 1, column ", 15), 0, "%s", err.path);
	cr_assert_not_null(strstr(err.msg, "duplicate"), "%s", err.msg);
	assert_defaults(&c);
	config_free(&c);
	assert_no_leaks();
}

Test(config, missing_file)
{
	struct config c;
	struct config_err err;
	char line[600];

	config_defaults(&c);
	cr_assert_eq(config_load(&c, "/nonexistent/dir/agent.json", &err), -1);
	cr_assert_str_eq(err.file, "/nonexistent/dir/agent.json");
	cr_assert_str_empty(err.path);
	cr_assert_str_eq(err.msg, "cannot open: No such file or directory");
	config_err_format(&err, line, sizeof(line));
	cr_assert_str_eq(line, "/nonexistent/dir/agent.json: cannot open: No such file or directory");
	assert_defaults(&c);

	cr_assert_eq(config_load(&c, "/tmp", &err), -1);
	cr_assert_str_eq(err.msg, "cannot read: Is a directory");
	assert_defaults(&c);
	assert_no_leaks();
}

Test(config, error_format)
{
	struct config_err err;
	char buf[600], tiny[8];

	memset(&err, 0, sizeof(err));
	snprintf(err.file, sizeof(err.file), "agent.json");
	snprintf(err.path, sizeof(err.path), "namespaces[1].window_sizes[0]");
	snprintf(err.msg, sizeof(err.msg), "expected a positive integer (seconds), got -5");
	config_err_format(&err, buf, sizeof(buf));
	cr_assert_str_eq(buf, "agent.json: namespaces[1].window_sizes[0]: "
			      "expected a positive integer (seconds), got -5");
	config_err_format(&err, tiny, sizeof(tiny));
	cr_assert_str_eq(tiny, "agent.j");
	err.file[0] = '\0';
	config_err_format(&err, buf, sizeof(buf));
	cr_assert_str_eq(buf, "namespaces[1].window_sizes[0]: expected a positive integer (seconds), got -5");
	config_err_format(&err, buf, 0);   /* must not write */
}

Test(config, ns_find)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(config_ns_find(&c, "default", 7), 0);
	cr_assert_eq(config_ns_find(&c, "defaultX", 7), 0, "only len bytes are compared");
	cr_assert_eq(config_ns_find(&c, "default", 6), -1);
	cr_assert_eq(config_ns_find(&c, "", 0), -1);
	cr_assert_eq(config_ns_find(&c, NULL, 0), -1);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": [{\"name\": \"a\", \"window_sizes\": [1]},"
				    " {\"name\": \"ab\", \"window_sizes\": [1]},"
				    " {\"name\": \"b\", \"window_sizes\": [1]}]}"), 0, "%s", err.msg);
	cr_assert_eq(config_ns_find(&c, "a", 1), 0);
	cr_assert_eq(config_ns_find(&c, "ab", 2), 1);
	cr_assert_eq(config_ns_find(&c, "b", 1), 2);
	cr_assert_eq(config_ns_find(&c, "abc", 3), -1);
	cr_assert_eq(config_ns_find(&c, "default", 7), -1);
	config_free(&c);
}

Test(config, strategy_opts_round_trip)
{
	static const char opts[] = "{\"host\":\"10.0.0.1\",\"port\":6379,\"password\":\"p\\\"w\\u00e9\","
				   "\"timeout_ms\":500,\"db\":3,\"prefix\":\"rl:\"}";
	struct config c;
	struct config_err err;
	char json[512];
	json_t *a, *b;

	snprintf(json, sizeof(json),
		 "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 0, \"strategy\": \"redis\","
		 " \"strategy_opts\": \n  %s}]}", opts);
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, json), 0, "%s: %s", err.path, err.msg);
	cr_assert_not_null(c.ns[0].strategy_opts);
	cr_assert_null(strchr(c.ns[0].strategy_opts, ' '), "%s", c.ns[0].strategy_opts);
	a = json_loads(opts, 0, NULL);
	b = json_loads(c.ns[0].strategy_opts, 0, NULL);
	cr_assert_not_null(a);
	cr_assert_not_null(b);
	cr_assert(json_equal(a, b), "%s", c.ns[0].strategy_opts);
	json_decref(a);
	json_decref(b);
	config_free(&c);
	cr_assert_null(c.ns[0].strategy_opts);
	assert_no_leaks();
}

/* Under ASan: reloading frees what the replaced namespaces owned, a
 * failed load frees what it allocated and keeps what was there. */
Test(config, ownership_across_loads)
{
	static const char with_opts[] =
		"{\"namespaces\": [{\"name\": \"r\", \"window_sizes\": [1], \"sync_rate\": 0,"
		" \"strategy\": \"redis\", \"strategy_opts\": {\"host\": \"10.0.0.2\"}}]}";
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_eq(load(&c, &err, with_opts), 0, "%s", err.msg);
	cr_assert_eq(load(&c, &err, with_opts), 0, "%s", err.msg);   /* replaces, frees the old */
	cr_assert_str_eq(c.ns[0].strategy_opts, "{\"host\":\"10.0.0.2\"}");

	/* no namespaces in the file: the loaded ones stay, opts and all */
	cr_assert_eq(load(&c, &err, "{\"max_keys\": 1024}"), 0, "%s", err.msg);
	cr_assert_eq(c.max_keys, 1024);
	cr_assert_str_eq(c.ns[0].strategy_opts, "{\"host\":\"10.0.0.2\"}");

	/* fails after allocating opts for namespaces[0]: nothing leaks, c intact */
	cr_assert_eq(load(&c, &err,
			  "{\"max_keys\": 2048, \"namespaces\": [{\"name\": \"p\", \"window_sizes\": [1],"
			  " \"sync_rate\": 0, \"strategy\": \"postgres\", \"strategy_opts\": {\"table\": \"x\"}},"
			  " {\"name\": \"p\", \"window_sizes\": [2]}]}"), -1);
	cr_assert_str_eq(err.path, "namespaces[1].name");
	cr_assert_eq(c.max_keys, 1024);
	cr_assert_eq(c.n_ns, 1);
	cr_assert_str_eq(c.ns[0].name, "r");
	cr_assert_str_eq(c.ns[0].strategy_opts, "{\"host\":\"10.0.0.2\"}");

	/* fails inside the namespace that allocated */
	cr_assert_eq(load(&c, &err,
			  "{\"namespaces\": [{\"strategy_opts\": {\"db\": \"x\"}, \"window_sizes\": [0]}]}"),
		     -1);
	cr_assert_str_eq(err.path, "namespaces[0].window_sizes[0]");
	cr_assert_str_eq(c.ns[0].strategy_opts, "{\"host\":\"10.0.0.2\"}");
	config_free(&c);
	assert_no_leaks();
}

/* After command-line overrides the daemon runs config_check(). */
Test(config, check_after_overrides)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	c.workers = 0;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "workers");
	cr_assert_str_eq(err.msg, "expected an integer in 1..64, got 0");
	cr_assert_str_empty(err.file);

	config_defaults(&c);
	snprintf(c.listen, sizeof(c.listen), "localhost");
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "listen");
	cr_assert_not_null(strstr(err.msg, "missing ':PORT'"), "%s", err.msg);

	/* -l HOST:PORT over a file that set a socket mode */
	config_defaults(&c);
	c.listen_mode = 0660;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "listen_mode");
	cr_assert_not_null(strstr(err.msg, "applies to a unix socket only"), "%s", err.msg);
	snprintf(c.listen, sizeof(c.listen), "unix:/run/x.sock");
	cr_assert_eq(config_check(&c, &err), 0, "%s: %s", err.path, err.msg);
	c.listen_mode = 01000;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "listen_mode");

	config_defaults(&c);
	c.var_scope = 5;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "var_scope");

	config_defaults(&c);
	c.log_level = LOG_LEVEL_COUNT;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "log_level");

	config_defaults(&c);
	c.max_frame_size = 100;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "max_frame_size");

	config_defaults(&c);
	c.ns[0].window_sizes[2] = 1;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "namespaces[0].window_sizes[2]");
	cr_assert_str_eq(err.msg, "duplicate window size 1 (also window_sizes[0])");

	config_defaults(&c);
	c.ns[0].sync_rate = 1;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "namespaces[0].strategy");

	config_defaults(&c);
	c.n_ns = 0;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "namespaces");

	config_defaults(&c);
	c.ns[1] = c.ns[0];
	c.n_ns = 2;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "namespaces[1].name");

	config_defaults(&c);
	c.ns[0].window_type = NS_WINDOW_TYPE_COUNT;
	cr_assert_eq(config_check(&c, &err), -1);
	cr_assert_str_eq(err.path, "namespaces[0].window_type");
}

/* admission: "local" (default) or "exact"; exact needs sync_rate > 0 and
 * a store that decides admissions. */
/* state_file: a path, none by default. */
Test(config, state_file)
{
	static const struct bad_case cases[] = {
		{ "{\"state_file\": 1}", "state_file", "a file path" },
		{ "{\"state_file\": \"\"}", "state_file", "expected a file path" },
	};
	struct config c;
	struct config_err err;

	EXPECT_ERRORS(cases);
	config_defaults(&c);
	cr_assert_str_empty(c.state_file);
	cr_assert_eq(load(&c, &err, "{\"state_file\": \"/var/lib/spoa-ratelimit/state\"}"), 0,
		     "%s: %s", err.path, err.msg);
	cr_assert_str_eq(c.state_file, "/var/lib/spoa-ratelimit/state");
	config_free(&c);
	assert_no_leaks();
}

/* shadow: a boolean, false by default. */
Test(config, shadow)
{
	static const struct bad_case cases[] = {
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"shadow\": \"yes\"}]}",
		  "namespaces[0].shadow", "true or false" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"shadow\": 1}]}",
		  "namespaces[0].shadow", "true or false" },
	};
	struct config c;
	struct config_err err;

	EXPECT_ERRORS(cases);
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": [{\"name\": \"a\", \"window_sizes\": [1]},"
				    "{\"name\": \"b\", \"window_sizes\": [1], \"shadow\": true}]}"),
		     0, "%s: %s", err.path, err.msg);
	cr_assert_not(c.ns[0].shadow);
	cr_assert(c.ns[1].shadow);
	config_free(&c);
	assert_no_leaks();
}

Test(config, admission)
{
	static const struct bad_case cases[] = {
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"admission\": \"strict\"}]}",
		  "namespaces[0].admission", "got string \"strict\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"admission\": \"exact\"}]}",
		  "namespaces[0].admission", "\"exact\" needs sync_rate > 0" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 0, \"strategy\": \"redis\","
		  " \"admission\": \"exact\"}]}",
		  "namespaces[0].admission", "\"exact\" needs sync_rate > 0" },
	};
	struct config c;
	struct config_err err;

	EXPECT_ERRORS(cases);
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": [{\"window_sizes\": [1], \"sync_rate\": 0.5,"
				    " \"strategy\": \"redis\", \"admission\": \"exact\"}]}"), 0,
		     "%s: %s", err.path, err.msg);
	cr_assert_eq(c.ns[0].admission, NS_ADMIT_EXACT);
	config_free(&c);
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": [{\"window_sizes\": [1]}]}"), 0);
	cr_assert_eq(c.ns[0].admission, NS_ADMIT_AUTO, "auto by default");
	cr_assert_eq(ns_admission_of(&c.ns[0]), NS_ADMIT_LOCAL, "auto is local without a store");
	config_free(&c);
	/* auto: exact where the store decides admissions (sync_rate > 0,
	 * redis or postgres), local otherwise; "local" is kept. */
	config_defaults(&c);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": ["
				    "{\"name\": \"a\", \"window_sizes\": [1], \"sync_rate\": 0.5,"
				    " \"strategy\": \"redis\"},"
				    "{\"name\": \"b\", \"window_sizes\": [1], \"sync_rate\": 0,"
				    " \"strategy\": \"redis\"},"
				    "{\"name\": \"c\", \"window_sizes\": [1], \"sync_rate\": 0.5,"
				    " \"strategy\": \"postgres\", \"admission\": \"local\"},"
				    "{\"name\": \"d\", \"window_sizes\": [1], \"sync_rate\": 0.5,"
				    " \"strategy\": \"postgres\", \"admission\": \"auto\"}]}"), 0,
		     "%s: %s", err.path, err.msg);
	cr_assert_eq(ns_admission_of(&c.ns[0]), NS_ADMIT_EXACT);
	cr_assert_eq(ns_admission_of(&c.ns[1]), NS_ADMIT_LOCAL, "sync_rate 0 is exact already");
	cr_assert_eq(ns_admission_of(&c.ns[2]), NS_ADMIT_LOCAL);
	cr_assert_eq(ns_admission_of(&c.ns[3]), NS_ADMIT_EXACT);
	config_free(&c);
	assert_no_leaks();
}

Test(config, limits)
{
	static const struct bad_case cases[] = {
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": -1}]}",
		  "namespaces[0].limit", "expected an integer in 0..1000000000000" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": 1.5}]}",
		  "namespaces[0].limit", "an integer (every window) or an object" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": \"10\"}]}",
		  "namespaces[0].limit", "got string" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": {}}]}",
		  "namespaces[0].limit", "at least one window size" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": {\"60\": 10}}]}",
		  "namespaces[0].limit.60", "no window of 60 s in window_sizes" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": {\"01\": 10}}]}",
		  "namespaces[0].limit.01", "as the key, got \"01\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": {\"1s\": 10}}]}",
		  "namespaces[0].limit.1s", "as the key" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"limit\": {\"1\": -2}}]}",
		  "namespaces[0].limit.1", "expected an integer in 0..1000000000000" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"caller_limit\": \"higher\"}]}",
		  "namespaces[0].caller_limit", "one of \"lower\", \"any\" or \"none\"" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"caller_limit\": \"none\"}]}",
		  "namespaces[0].caller_limit", "\"none\" needs a configured limit" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"max_cost\": 0}]}",
		  "namespaces[0].max_cost", "expected a number > 0" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"max_cost\": \"5\"}]}",
		  "namespaces[0].max_cost", "a number > 0" },
		{ "{\"namespaces\": [{\"window_sizes\": [1], \"caller_admission\": 1}]}",
		  "namespaces[0].caller_admission", "true or false" },
	};
	struct config c;
	struct config_err err;

	EXPECT_ERRORS(cases);
	config_defaults(&c);
	cr_assert_eq(ns_limit_of(&c.ns[0], 60), NS_LIMIT_NONE, "no limit by default");
	cr_assert_eq(c.ns[0].caller_limit, NS_CALLER_LOWER);
	/* Without a limit: whatever a trusted caller asks, 1 for others; a
	 * caller's limit there is a trusted caller's only (caller_limit
	 * "lower"). */
	cr_assert_eq(ns_max_cost(&c.ns[0], false, 0, true), (double)NS_LIMIT_MAX);
	cr_assert_eq(ns_max_cost(&c.ns[0], false, 0, false), 1.0);
	cr_assert(ns_caller_may_limit(&c.ns[0], NS_LIMIT_NONE, true));
	cr_assert_not(ns_caller_may_limit(&c.ns[0], NS_LIMIT_NONE, false));
	cr_assert(ns_caller_may_limit(&c.ns[0], 10, false), "where one is configured: lower it");
	/* With a limit: max(1, floor(limit / 2)), trusted or not. */
	static const int64_t lims[][2] = { { 0, 1 }, { 1, 1 }, { 2, 1 }, { 3, 1 }, { 4, 2 },
					   { 5, 2 }, { 7, 3 }, { 100, 50 },
					   { NS_LIMIT_MAX, NS_LIMIT_MAX / 2 } };
	for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
		cr_assert_eq(ns_max_cost(&c.ns[0], true, lims[i][0], false), (double)lims[i][1],
			     "limit %lld", (long long)lims[i][0]);
		cr_assert_eq(ns_max_cost(&c.ns[0], true, lims[i][0], true), (double)lims[i][1]);
	}
	cr_assert_not(c.ns[0].caller_admission);
	cr_assert_eq(load(&c, &err, "{\"namespaces\": ["
				    "{\"name\": \"a\", \"window_sizes\": [1, 60], \"limit\": 7},"
				    "{\"name\": \"b\", \"window_sizes\": [1, 60, 3600],"
				    " \"limit\": {\"60\": 100, \"1\": 10}, \"caller_limit\": \"any\","
				    " \"caller_admission\": true},"
				    "{\"name\": \"c\", \"window_sizes\": [1], \"limit\": 0,"
				    " \"caller_limit\": \"none\", \"max_cost\": 0.5}]}"), 0,
		     "%s: %s", err.path, err.msg);
	cr_assert_eq(ns_limit_of(&c.ns[0], 1), 7);
	cr_assert_eq(ns_limit_of(&c.ns[0], 60), 7);
	cr_assert_eq(ns_max_cost(&c.ns[0], true, 7, true), 3.0, "half the limit");
	cr_assert_eq(ns_limit_of(&c.ns[1], 1), 10);
	cr_assert_eq(ns_limit_of(&c.ns[1], 60), 100);
	cr_assert_eq(ns_limit_of(&c.ns[1], 3600), NS_LIMIT_NONE);
	cr_assert_eq(ns_max_cost(&c.ns[1], true, 100, false), 50.0);
	cr_assert_eq(ns_max_cost(&c.ns[1], false, 0, true), 100.0,
		     "no limit, trusted: the largest configured limit, as before");
	cr_assert_eq(ns_max_cost(&c.ns[1], false, 0, false), 1.0);
	cr_assert(ns_caller_may_limit(&c.ns[1], NS_LIMIT_NONE, false), "caller_limit \"any\"");
	cr_assert_eq(c.ns[1].caller_limit, NS_CALLER_ANY);
	cr_assert(c.ns[1].caller_admission);
	cr_assert_eq(ns_limit_of(&c.ns[2], 1), 0);
	/* max_cost set: for everyone, whatever the limit. */
	cr_assert_eq(ns_max_cost(&c.ns[2], true, 0, true), 0.5);
	cr_assert_eq(ns_max_cost(&c.ns[2], false, 0, false), 0.5);
	cr_assert_eq(ns_max_cost(&c.ns[2], true, 1000, false), 0.5);
	config_free(&c);
	assert_no_leaks();
}

Test(config, http_trust_keys)
{
	static const struct bad_case cases[] = {
		{ "{\"http_token\": \"\"}", "http_token", "expected 1..255 visible ASCII" },
		{ "{\"http_token\": \"a b\"}", "http_token", "visible ASCII characters only" },
		{ "{\"http_token\": 5}", "http_token", "got integer" },
		{ "{\"http_metrics_token\": true}", "http_metrics_token", "needs http_token" },
		{ "{\"sched_batch\": 1}", "sched_batch", "got integer" },
		{ "{\"collect_us\": 1001}", "collect_us", "0..1000" },
		{ "{\"collect_us\": -1}", "collect_us", "0..1000" },
		{ "{\"http_max_connections\": 0}", "http_max_connections", "1..1000000" },
		{ "{\"max_connections\": 10, \"http_max_connections\": 11}", "http_max_connections",
		  "at most max_connections (10)" },
		{ "{\"http_max_buffer_memory\": 1024}", "http_max_buffer_memory", "65536.." },
		{ "{\"max_buffer_memory\": 1048576, \"http_max_buffer_memory\": 2097152}",
		  "http_max_buffer_memory", "at most max_buffer_memory" },
	};
	struct config c;
	struct config_err err;

	EXPECT_ERRORS(cases);
	config_defaults(&c);
	cr_assert_str_empty(c.http_token, "open by default");
	cr_assert_eq(config_http_max_connections(&c), 5000, "half of max_connections");
	cr_assert_eq(config_http_max_buffer_memory(&c), 64u << 20, "a quarter");
	cr_assert_eq(load(&c, &err, "{\"http_token\": \"s3cr3t-t0ken\", \"http_metrics_token\": true,"
				    " \"max_connections\": 8, \"http_max_connections\": 2,"
				    " \"max_buffer_memory\": 1048576, \"http_max_buffer_memory\": 131072}"),
		     0, "%s: %s", err.path, err.msg);
	cr_assert_str_eq(c.http_token, "s3cr3t-t0ken");
	cr_assert(c.http_metrics_token);
	cr_assert_eq(config_http_max_connections(&c), 2);
	cr_assert_eq(config_http_max_buffer_memory(&c), 131072);
	config_free(&c);
	cr_assert_eq(load(&c, &err, "{\"sched_batch\": false, \"collect_us\": 0}"), 0, "%s: %s",
		     err.path, err.msg);
	cr_assert_not(config_sched_batch(&c, false));
	cr_assert_eq(config_collect_us(&c, false), 0);
	config_free(&c);
	assert_no_leaks();
}

/* Left to the agent, sched_batch and collect_us are on unless a namespace
 * syncs at sync_rate 0 (the store's answer's wake-up must wait neither
 * for HAProxy's time slice nor for a collect sleep), and off while the
 * worker serves HAProxy 2.x alone (bursts); set, they are as set. */
Test(config, sched_batch_and_collect_us_follow_the_peers_and_the_store)
{
	static const struct {
		const char *json;
		bool batch, batch_bursts;
		uint32_t collect, collect_bursts;
	} cases[] = {
		{ "{}", true, false, 20, 0 },
		{ "{\"namespaces\": [{\"name\": \"a\", \"window_sizes\": [1], \"sync_rate\": 1,"
		  " \"strategy\": \"redis\"}]}", true, false, 20, 0 },
		{ "{\"namespaces\": [{\"name\": \"a\", \"window_sizes\": [1]},"
		  " {\"name\": \"b\", \"window_sizes\": [1], \"sync_rate\": 0,"
		  " \"strategy\": \"redis\"}]}", false, false, 0, 0 },
		{ "{\"sched_batch\": true, \"collect_us\": 50, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [1], \"sync_rate\": 0, \"strategy\": \"redis\"}]}", true, true,
		  50, 50 },
		{ "{\"sched_batch\": false, \"collect_us\": 0}", false, false, 0, 0 },
		{ "{\"sched_batch\": true}", true, true, 20, 0 },
	};
	struct config c;
	struct config_err err;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		config_defaults(&c);
		cr_assert_eq(load(&c, &err, cases[i].json), 0, "%s: %s: %s", cases[i].json, err.path,
			     err.msg);
		cr_expect_eq(config_sched_batch(&c, false), cases[i].batch, "%s", cases[i].json);
		cr_expect_eq(config_sched_batch(&c, true), cases[i].batch_bursts, "%s",
			     cases[i].json);
		cr_expect_eq(config_collect_us(&c, false), cases[i].collect, "%s", cases[i].json);
		cr_expect_eq(config_collect_us(&c, true), cases[i].collect_bursts, "%s",
			     cases[i].json);
		config_free(&c);
	}
	assert_no_leaks();
}

/* The peers front (docs/PEERS.md): its object's keys and defaults, and a
 * namespace's haproxy_tables, read and refused at their paths. */
Test(config, peers_and_haproxy_tables)
{
	struct config c;
	struct config_err err;

	config_defaults(&c);
	cr_assert_str_eq(c.peers_name, "spoa-ratelimit");
	cr_assert_eq(c.peers_push_ms, 50);
	cr_assert_eq(c.peers_node_keys, 65536);
	cr_assert_eq(c.ns[0].haproxy.from[0], '\0');
	cr_assert_eq(load(&c, &err,
			  "{\"peers\": {\"listen\": \"127.0.0.1:10000\", \"name\": \"agg\", "
			  "\"push_ms\": 20, \"node_keys\": 1000},"
			  " \"namespaces\": [{\"name\": \"api\", \"window_sizes\": [10],"
			  " \"haproxy_tables\": {\"from\": \"rl/req_local\", \"into\": \"/req_cluster\"}},"
			  " {\"name\": \"conn\", \"window_sizes\": [5], \"haproxy_tables\":"
			  " {\"from\": \"req_local\", \"into\": \"conn_cluster\","
			  " \"data_type\": \"gpc_rate(3)\"}}]}"), 0, "%s: %s", err.path, err.msg);
	cr_assert_str_eq(c.peers_listen, "127.0.0.1:10000");
	cr_assert_str_eq(c.peers_name, "agg");
	cr_assert_eq(c.peers_push_ms, 20);
	cr_assert_eq(c.peers_node_keys, 1000);
	cr_assert_str_eq(c.ns[0].haproxy.from, "rl/req_local");
	cr_assert_str_eq(c.ns[0].haproxy.into, "/req_cluster");
	cr_assert_eq(c.ns[0].haproxy.data_type, NS_HAPROXY_DT_AUTO);
	cr_assert_eq(c.ns[1].haproxy.data_type, 24, "gpc_rate");
	cr_assert_eq(c.ns[1].haproxy.data_index, 3);
	config_free(&c);

	static const struct {
		const char *json, *path, *msg;
	} cases[] = {
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\", \"name\": \"a b\"}}", "peers.name",
		  "peer name" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\", \"push_ms\": 1}}", "peers.push_ms",
		  "5..10000" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\", \"nam\": \"x\"}}", "peers.nam",
		  "did you mean \"name\"" },
		{ "{\"peers\": 1}", "peers", "an object" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"t\"}}]}",
		  "namespaces[0].haproxy_tables.into", "missing" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"s/t\", \"into\": \"/t\"}}]}",
		  "namespaces[0].haproxy_tables.into", "the same table as from" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10, 60], \"haproxy_tables\": {\"from\": \"t\", \"into\": \"u\"}}]}",
		  "namespaces[0].window_sizes", "one window size" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"t\", \"into\": \"u\","
		  " \"data_type\": \"server_id\"}}]}",
		  "namespaces[0].haproxy_tables.data_type", "not a counter or a rate" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"t\", \"into\": \"u\","
		  " \"data_type\": \"http_req_rate(1)\"}}]}",
		  "namespaces[0].haproxy_tables.data_type", "\"auto\", a data type" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"t\", \"into\": \"u\","
		  " \"data_type\": \"gpc_rate\"}}]}",
		  "namespaces[0].haproxy_tables.data_type", "\"auto\", a data type" },
		{ "{\"namespaces\": [{\"name\": \"a\", \"window_sizes\": [10], \"haproxy_tables\":"
		  " {\"from\": \"t\", \"into\": \"u\"}}]}",
		  "namespaces[0].haproxy_tables", "set peers.listen" },
		{ "{\"peers\": {\"listen\": \"127.0.0.1:10000\"}, \"namespaces\": [{\"name\": \"a\","
		  " \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"t\", \"into\": \"u\"}},"
		  " {\"name\": \"b\", \"window_sizes\": [10], \"haproxy_tables\": {\"from\": \"t\","
		  " \"into\": \"s/u\", \"data_type\": \"conn_rate\"}}]}",
		  "namespaces[1].haproxy_tables.into", "the same into table as namespaces[0]" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		config_defaults(&c);
		cr_assert_eq(load(&c, &err, cases[i].json), -1, "%s", cases[i].json);
		cr_assert_str_eq(err.path, cases[i].path, "%s: %s", cases[i].json, err.msg);
		cr_assert_not_null(strstr(err.msg, cases[i].msg), "%s: %s", cases[i].json, err.msg);
		cr_assert_str_eq(c.peers_name, "spoa-ratelimit", "left untouched");
		config_free(&c);
	}
	assert_no_leaks();
}
