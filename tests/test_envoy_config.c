/*
 * test_envoy_config.c - envoyproxy/ratelimit's configuration format
 * (agent/envoy_config.c), its descriptor trees and matcher
 * (agent/envoy_match.c), and the "envoy_config" key (agent/config_envoy.c).
 *
 * envoyproxy/ratelimit's own corpus (the YAML files of its test/config) is read from
 * the folder named by ENVOY_RATELIMIT_CORPUS when it is set (not
 * committed here: fetch envoyproxy/ratelimit and point the variable at its
 * test/config), each file loaded or refused for the same reason as its
 * config_test.go says; skipped otherwise. Small YAML cases of our own
 * cover every feature and every refusal whatever the corpus.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/envoy_config.h"
#include "agent/ratelimit.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ---- */

static struct envoy_config cfg;
static struct envoy_err err;
static char scratch[ENVOY_NAME_MAX];

static void reset(void)
{
	envoy_config_free(&cfg);
	memset(&err, 0, sizeof(err));
}

TestSuite(yaml, .fini = reset);
TestSuite(corpus, .fini = reset);
TestSuite(match, .fini = reset);
TestSuite(keys, .fini = reset);

/* One YAML text as a file named name, then finished; 0 or -1. */
static int load(const char *name, const char *yaml)
{
	int rc = envoy_config_add(&cfg, name, yaml, strlen(yaml), false, &err);

	return rc == 0 ? envoy_config_finish(&cfg, &err) : rc;
}

/* Refused with msg (a part of it) on line L (0: any). */
static void refused(const char *yaml, const char *msg, unsigned line)
{
	char where[32];

	reset();
	cr_assert_eq(load("t.yaml", yaml), -1, "loaded:\n%s", yaml);
	cr_assert(strstr(err.msg, msg), "got \"%s\", expected \"%s\"\n%s", err.msg, msg, yaml);
	cr_assert_str_eq(err.file, "t.yaml");
	if (line) {
		snprintf(where, sizeof(where), "line %u,", line);
		cr_assert(strncmp(err.path, where, strlen(where)) == 0, "at \"%s\", expected %s",
			  err.path, where);
	}
}

static const struct envoy_domain *dom(const char *name)
{
	const struct envoy_domain *d = envoy_config_find(&cfg, name, strlen(name));

	cr_assert_not_null(d, "no domain %s", name);
	return d;
}

/* The limit of a descriptor "k1=v1,k2=v2" (NULL for none). */
static const struct envoy_limit *lim(const struct envoy_domain *d, const char *desc,
				     struct envoy_match *m)
{
	static char copy[512];
	struct rls_entry e[ENVOY_DEPTH_MAX];
	size_t n = 0;
	char *save = NULL;

	snprintf(copy, sizeof(copy), "%s", desc);
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(t, '=');

		e[n].key = (struct pb_str){ t, eq ? (size_t)(eq - t) : strlen(t) };
		e[n].value = eq ? (struct pb_str){ eq + 1, strlen(eq + 1) } : (struct pb_str){ "", 0 };
		n++;
	}
	return envoy_match(d, e, n, scratch, sizeof(scratch), m) ? m->limit : NULL;
}

static uint32_t rpu(const struct envoy_domain *d, const char *desc)
{
	struct envoy_match m;
	const struct envoy_limit *l = lim(d, desc, &m);

	cr_assert_not_null(l, "no limit for %s", desc);
	return l->requests_per_unit;
}

static bool none(const struct envoy_domain *d, const char *desc)
{
	struct envoy_match m;

	return lim(d, desc, &m) == NULL;
}

/* The key of a descriptor as text. */
static const char *key_of(const struct envoy_domain *d, const char *desc)
{
	static char out[1024];
	static char copy[512];
	struct rls_entry e[ENVOY_DEPTH_MAX];
	struct envoy_match m;
	size_t n = 0;
	char *save = NULL;
	long len;

	snprintf(copy, sizeof(copy), "%s", desc);
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(t, '=');

		e[n].key = (struct pb_str){ t, (size_t)(eq - t) };
		e[n].value = (struct pb_str){ eq + 1, strlen(eq + 1) };
		n++;
	}
	cr_assert(envoy_match(d, e, n, scratch, sizeof(scratch), &m), "no limit for %s", desc);
	len = envoy_match_key(&m, e, n, out, sizeof(out) - 1);
	cr_assert(len > 0);
	out[len] = '\0';
	return out;
}

/* ---- our own YAML: every feature ---- */

static const char features[] =
	"domain: edge\n"
	"descriptors:\n"
	"  - key: remote_address\n"
	"    rate_limit: {unit: Minute, requests_per_unit: 10}\n"
	"  - key: remote_address\n"
	"    value: 10.0.0.1\n"
	"    rate_limit: {unit: second, requests_per_unit: 100, name: vip}\n"
	"  - key: path\n"
	"    value: /api/*\n"
	"    shadow_mode: yes\n"
	"    rate_limit: {unit: hour, requests_per_unit: 1000, replaces: [{name: vip}]}\n"
	"  - key: path\n"
	"    value: /static\n"
	"  - key: tenant\n"
	"    descriptors:\n"
	"      - key: plan\n"
	"        value: 200\n"
	"        detailed_metric: true\n"
	"        rate_limit: {window: 90, requests_per_unit: 9, window_type: fixed,\n"
	"                     delay_max_ms: 250}\n"
	"      - key: plan\n"
	"        value: ~\n"
	"        rate_limit: {unlimited: true}\n"
	"  - key: long\n"
	"    rate_limit: {unit: week, requests_per_unit: 7}\n"
	"  - key: month\n"
	"    rate_limit: {unit: MONTH, requests_per_unit: 1, window: 2592000}\n"
	"  - key: year\n"
	"    rate_limit: {unit: year, requests_per_unit: 4294967295}\n"
	"  - key: day\n"
	"    rate_limit: {window: 86400, requests_per_unit: 0}\n"
	"  - key: files\n"
	"    value: f/*\n"
	"    share_threshold: true\n"
	"    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	"  - key: meta\n"
	"    metadata: {any: [1, 2.5, {x: y}]}\n"
	"    value_to_metric: true\n"
	"    quota_mode: false\n"
	"    rate_limit: {unit: minute, requests_per_unit: 3}\n";

Test(yaml, every_feature_loads)
{
	const struct envoy_domain *d;
	struct envoy_match m;
	const struct envoy_limit *l;

	cr_assert_eq(load("f.yaml", features), 0, "%s: %s", err.path, err.msg);
	d = dom("edge");
	/* unit names in any case; key-only and value nodes */
	l = lim(d, "remote_address=1.2.3.4", &m);
	cr_assert(l && l->requests_per_unit == 10 && l->unit == RLS_UNIT_MINUTE && l->window == 60);
	cr_assert_eq(l->window_type, ENVOY_WT_DEFAULT);
	l = lim(d, "remote_address=10.0.0.1", &m);
	cr_assert(l && l->window == 1 && strcmp(l->name, "vip") == 0);
	/* shadow_mode, replaces */
	l = lim(d, "path=/api/v1", &m);
	cr_assert(l && l->shadow_mode && l->n_replaces == 1 && strcmp(l->replaces[0], "vip") == 0);
	/* a value without a limit: none, not the wildcard's */
	cr_assert(none(d, "path=/static"));
	cr_assert(none(d, "path=/other"));
	/* window extension, window_type, delay, a numeric value read as text */
	l = lim(d, "tenant=acme,plan=200", &m);
	cr_assert(l && l->window == 90 && l->unit == RLS_UNIT_UNKNOWN && l->requests_per_unit == 9);
	cr_assert(l->window_type == NS_WINDOW_FIXED && l->delay_max_ms == 250 && l->detailed_metric);
	/* a null value is no value: the key-only node, unlimited */
	l = lim(d, "tenant=acme,plan=free", &m);
	cr_assert(l && l->unlimited);
	cr_assert_eq(rpu(d, "long=x"), 7);
	cr_assert_eq(lim(d, "long=x", &m)->window, 604800);
	cr_assert_eq(lim(d, "month=x", &m)->window, 2592000);
	cr_assert_eq(lim(d, "year=x", &m)->window, 31536000);
	cr_assert_eq(rpu(d, "year=x"), UINT32_MAX);
	/* a window that is a unit's length reports that unit */
	cr_assert_eq(lim(d, "day=x", &m)->unit, RLS_UNIT_DAY);
	cr_assert_eq(rpu(d, "meta=x"), 3);
	/* the domain's windows and delay bound, for its namespace */
	cr_assert_eq(d->n_windows, 8);
	cr_assert_eq(d->delay_max_ms, 250);
}

Test(yaml, a_folder_in_name_order_and_merged_domains)
{
	char dir[] = "/tmp/envoycfgXXXXXX", f[256];
	FILE *out;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(f, sizeof(f), "%s/b.yml", dir);
	out = fopen(f, "w");
	fputs("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
	      out);
	fclose(out);
	snprintf(f, sizeof(f), "%s/a.yaml", dir);
	out = fopen(f, "w");
	fputs("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
	      out);
	fclose(out);
	/* neither a dot file nor another extension is read */
	snprintf(f, sizeof(f), "%s/.hidden.yaml", dir);
	out = fopen(f, "w");
	fputs("not: [valid\n", out);
	fclose(out);
	snprintf(f, sizeof(f), "%s/notes.txt", dir);
	out = fopen(f, "w");
	fputs("not: [valid\n", out);
	fclose(out);
	cr_assert_eq(envoy_config_load(&cfg, dir, false, &err), -1);
	cr_assert(strstr(err.msg, "duplicate domain 'd' in config file"), "%s", err.msg);
	cr_assert(strstr(err.file, "b.yml"), "the later file: %s", err.file);
	cr_assert_eq(envoy_config_load(&cfg, dir, true, &err), 0, "%s", err.msg);
	cr_assert_eq(rpu(dom("d"), "a=x"), 1);
	cr_assert_eq(rpu(dom("d"), "b=x"), 2);
	cr_assert_eq(dom("d")->n_files, 2);
	reset();
	/* a duplicate across merged files names the later file and line */
	snprintf(f, sizeof(f), "%s/c.yaml", dir);
	out = fopen(f, "w");
	fputs("domain: d\ndescriptors:\n  - key: x\n  - key: a\n", out);
	fclose(out);
	cr_assert_eq(envoy_config_load(&cfg, dir, true, &err), -1);
	cr_assert(strstr(err.msg, "duplicate descriptor composite key 'd.a'"), "%s", err.msg);
	cr_assert(strstr(err.file, "c.yaml") && strcmp(err.path, "line 4, column 5") == 0,
		  "%s %s", err.file, err.path);
	cr_assert_eq(cfg.n, 0, "left empty on failure");
	/* a missing path */
	cr_assert_eq(envoy_config_load(&cfg, "/nonexistent/envoy", false, &err), -1);
	cr_assert(strstr(err.msg, "cannot open"));
	cr_assert_eq(system(NULL) != 0, 1);
	snprintf(f, sizeof(f), "rm -rf %s", dir);
	cr_assert_eq(system(f), 0);
}

/* ---- every refusal ---- */

Test(yaml, envoyproxy_refusals)
{
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: foo, requests_per_unit: 1}\n",
		"invalid rate limit unit 'foo'", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
		"invalid rate limit unit ''", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown}\n",
		"invalid rate limit unit 'unknown'", 4);
	refused("'''\n", "error loading config file: found unexpected end of stream", 0);
	refused("domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n",
		"duplicate descriptor composite key 'd.a_b'", 5);
	/* one name for "a_b" and "a" with the value "b", as there */
	refused("domain: d\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b\n",
		"duplicate descriptor composite key 'd.a_b'", 4);
	refused("domain: d\ndescriptors:\n  - key: p\n    descriptors:\n      - key: c\n      - key: c\n",
		"duplicate descriptor composite key 'd.p.c'", 6);
	/* an empty value is no value: "a" twice */
	refused("domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: ''\n",
		"duplicate descriptor composite key 'd.a'", 4);
	refused("descriptors:\n", "config file cannot have empty domain", 0);
	refused("", "config file cannot have empty domain", 0);
	refused("domain: ~\n", "config file cannot have empty domain", 0);
	refused("domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key", 3);
	refused("domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: day}\n",
		"config error, unknown key 'ratelimit'", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requestsperunit: 5}\n",
		"config error, unknown key 'requestsperunit'", 4);
	refused("domain: d\ndescriptors:\n  - a\n  - b\n",
		"config error, yaml file contains list of type other than map: a", 3);
	refused("0.25: d\n", "config error, key is not of type string: 0.25", 1);
	refused("yes: d\n", "config error, key is not of type string: yes", 1);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, name: s,\n"
		"      replaces: [{name: s}]}\n",
		"replaces should not contain name of same descriptor", 5);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, replaces: [{name: }]}\n",
		"should not have an empty replaces entry", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: day}\n",
		"should not specify rate limit unit when unlimited", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n",
		"share_threshold can only be used with wildcard values (containing '*'), but found "
		"key 'a'", 3);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
		"error checking config", 4);
}

Test(yaml, our_refusals)
{
	char deep[4096] = "domain: d\n";
	char bomb[2048];

	/* the extensions */
	refused("domain: d\ndescriptors:\n  - key: a\n    window: 60\n",
		"'window' (this agent's extension) belongs in rate_limit", 4);
	refused("domain: d\ndelay_max_ms: 5\n", "'delay_max_ms' (this agent's extension) belongs in "
		"rate_limit", 2);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, window: 90}\n",
		"window 90 s and unit minute (60 s) disagree", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, window: 9}\n",
		"should not specify rate limit window when unlimited", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {window: 0}\n",
		"window: expected an integer 1..31536000, got 0", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {window: 31536001}\n",
		"window: expected an integer 1..31536000", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {window: '60'}\n",
		"window: expected an integer", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, window_type: leaky}\n",
		"window_type: expected sliding or fixed, got 'leaky'", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, delay_max_ms: 60001}\n",
		"delay_max_ms: expected an integer 0..60000", 4);
	/* types */
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
		"requests_per_unit: expected an integer 0..4294967295, got -1", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
		"requests_per_unit: expected an integer 0..4294967295", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: '5'}\n",
		"requests_per_unit: expected an integer", 4);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unlimited: maybe}\n",
		"unlimited: expected true or false", 4);
	/* a list anywhere must hold maps (validateYamlKeys), a map where a
	 * string goes is ours to refuse */
	refused("domain: d\ndescriptors:\n  - key: [a]\n",
		"config error, yaml file contains list of type other than map: a", 3);
	refused("domain: d\ndescriptors:\n  - key: {a: b}\n", "unknown key 'a'", 3);
	refused("domain: d\ndescriptors:\n  - key: {name: b}\n", "key: expected a string", 3);
	refused("domain: d\ndescriptors: {key: a}\n", "descriptors: expected a list", 2);
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n", "rate_limit: expected a map", 4);
	refused("domain: d\ndomain: e\n", "key 'domain' given twice", 2);
	refused("- a\n", "the document is not a map", 1);
	refused("domain: d\n---\ndomain: e\n", "a second YAML document", 3);
	refused("domain: \"a\\tb\"\n", "cannot name a namespace", 1);
	refused("domain: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		"cannot name a namespace", 1);
	refused("domain: d\ndescriptors: [\n", "error loading config file", 0);
	/* more than 8 window lengths in a domain */
	refused("domain: d\ndescriptors:\n"
		"  - {key: a, rate_limit: {window: 1}}\n  - {key: b, rate_limit: {window: 2}}\n"
		"  - {key: c, rate_limit: {window: 3}}\n  - {key: e, rate_limit: {window: 4}}\n"
		"  - {key: f, rate_limit: {window: 5}}\n  - {key: g, rate_limit: {window: 6}}\n"
		"  - {key: h, rate_limit: {window: 7}}\n  - {key: i, rate_limit: {window: 8}}\n"
		"  - {key: j, rate_limit: {window: 9}}\n",
		"domain 'd' counts 9 window lengths; a namespace has at most 8", 0);
	/* 33 levels of descriptors never match (a request has at most 32
	 * entries): refused, in flow style */
	strcat(deep, "descriptors: ");
	for (int i = 0; i < 33; i++) {
		char item[64];

		snprintf(item, sizeof(item), "[{key: k%d, descriptors: ", i);
		strcat(deep, item);
	}
	strcat(deep, "[]");
	for (int i = 0; i < 33; i++)
		strcat(deep, "}]");
	strcat(deep, "\n");
	refused(deep, "descriptors nested deeper than 32 levels", 0);
	/* aliases that expand without end */
	snprintf(bomb, sizeof(bomb),
		 "a: &a [{key: x}, {key: x}, {key: x}, {key: x}, {key: x}, {key: x}, {key: x}]\n"
		 "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
		 "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
		 "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
		 "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
		 "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
		 "domain: d\n");
	reset();
	cr_assert_eq(load("t.yaml", bomb), -1);
	/* unknown keys a..f come first; as descriptors the bomb expands */
	snprintf(bomb, sizeof(bomb),
		 "domain: d\ndescriptors: &f\n  - {key: x, descriptors: *f}\n");
	refused(bomb, "nested deeper than", 0);
}

/* ---- envoyproxy/ratelimit's corpus ---- */

/* Each file of test/config and what its config_test.go expects: NULL
 * loads (alone), else the error's text. */
static const struct {
	const char *file;
	const char *refused;
} corpus_files[] = {
	{ "bad_limit_unit.yaml", "invalid rate limit unit 'foo'" },
	{ "bad_yaml.yaml", "found unexpected end of stream" },
	{ "basic_config.yaml", NULL },
	{ "duplicate_domain.yaml", NULL },
	{ "duplicate_key.yaml", "duplicate descriptor composite key 'test-domain.key1_value1'" },
	{ "empty_domain.yaml", "config file cannot have empty domain" },
	{ "empty_key.yaml", "descriptor has empty key" },
	{ "merge_domain_key1.yaml", NULL },
	{ "merge_domain_key2.yaml", NULL },
	{ "metadata.yaml", NULL },
	{ "misspelled_key.yaml", "config error, unknown key 'ratelimit'" },
	{ "misspelled_key2.yaml", "config error, unknown key 'requestsperunit'" },
	{ "non_map_list.yaml", "config error, yaml file contains list of type other than map: a" },
	{ "non_string_key.yaml", "config error, key is not of type string: 0.25" },
	{ "replaces_empty.yaml", "should not have an empty replaces entry" },
	{ "replaces_self.yaml", "replaces should not contain name of same descriptor" },
	{ "shadowmode_config.yaml", NULL },
	{ "share_threshold.yaml", NULL },
	{ "unlimited_with_unit.yaml", "should not specify rate limit unit when unlimited" },
	{ "wildcard.yaml", NULL },
};

static const char *corpus_dir(void)
{
	const char *d = getenv("ENVOY_RATELIMIT_CORPUS");

	return d && *d && access(d, R_OK) == 0 ? d : NULL;
}

#define NEED_CORPUS()                                                                      \
	do {                                                                               \
		if (!corpus_dir())                                                         \
			cr_skip_test("ENVOY_RATELIMIT_CORPUS unset: envoyproxy/ratelimit's " \
				     "test/config not given");                             \
	} while (0)

/* Loads corpus files into cfg (a folder of links to them). */
static int corpus_load(bool merge, const char *a, const char *b)
{
	char dir[] = "/tmp/envoycorpusXXXXXX", src[1024], dst[1024], rm[1100];
	int rc;

	cr_assert_not_null(mkdtemp(dir));
	for (int i = 0; i < 2; i++) {
		const char *f = i ? b : a;

		if (!f)
			continue;
		snprintf(src, sizeof(src), "%s/%s", corpus_dir(), f);
		snprintf(dst, sizeof(dst), "%s/%d-%s", dir, i, f);
		cr_assert_eq(symlink(src, dst), 0);
	}
	rc = envoy_config_load(&cfg, dir, merge, &err);
	snprintf(rm, sizeof(rm), "rm -rf %s", dir);
	cr_assert_eq(system(rm), 0);
	return rc;
}

Test(corpus, every_file_loads_or_is_refused_for_its_reason)
{
	DIR *d;
	struct dirent *de;
	size_t seen = 0;

	NEED_CORPUS();
	for (size_t i = 0; i < NELEM(corpus_files); i++) {
		char path[1024];

		reset();
		snprintf(path, sizeof(path), "%s/%s", corpus_dir(), corpus_files[i].file);
		if (access(path, R_OK) != 0)
			continue;
		seen++;
		if (!corpus_files[i].refused) {
			cr_assert_eq(envoy_config_load(&cfg, path, false, &err), 0, "%s: %s: %s",
				     corpus_files[i].file, err.path, err.msg);
		} else {
			cr_assert_eq(envoy_config_load(&cfg, path, false, &err), -1, "%s loaded",
				     corpus_files[i].file);
			cr_assert(strstr(err.msg, corpus_files[i].refused), "%s: got \"%s\"",
				  corpus_files[i].file, err.msg);
			cr_assert(strstr(err.file, corpus_files[i].file));
		}
	}
	cr_assert_geq(seen, 15, "the corpus holds %zu of the known files", seen);
	/* a file the table does not know is a new case to look at */
	d = opendir(corpus_dir());
	cr_assert_not_null(d);
	while ((de = readdir(d))) {
		bool known = false;

		if (!strstr(de->d_name, ".yaml"))
			continue;
		for (size_t i = 0; i < NELEM(corpus_files); i++)
			known |= strcmp(de->d_name, corpus_files[i].file) == 0;
		cr_expect(known, "corpus file %s: not in the table", de->d_name);
	}
	closedir(d);
}

Test(corpus, pairs_of_files)
{
	NEED_CORPUS();
	cr_assert_eq(corpus_load(false, "basic_config.yaml", "duplicate_domain.yaml"), -1);
	cr_assert(strstr(err.msg, "duplicate domain 'test-domain' in config file"), "%s", err.msg);
	cr_assert(strstr(err.file, "duplicate_domain.yaml"));
	reset();
	cr_assert_eq(corpus_load(true, "merge_domain_key1.yaml", "merge_domain_key2.yaml"), 0, "%s",
		     err.msg);
	cr_assert_eq(rpu(dom("test-domain"), "key1=value1"), 10);
	cr_assert_eq(rpu(dom("test-domain"), "key2=value2"), 20);
	reset();
	cr_assert_eq(corpus_load(true, "merge_domain_key1.yaml", "merge_domain_key1.yaml"), -1);
	cr_assert(strstr(err.msg, "duplicate descriptor composite key 'test-domain.key1_value1'"));
	reset();
	cr_assert_eq(corpus_load(false, "merge_domain_key1.yaml", "merge_domain_key2.yaml"), -1);
	cr_assert(strstr(err.msg, "duplicate domain 'test-domain'"));
}

/* config_test.go's GetLimit() cases on basic_config.yaml. */
Test(corpus, basic_config_limits)
{
	char path[1024];
	const struct envoy_domain *d;
	struct envoy_match m;

	NEED_CORPUS();
	snprintf(path, sizeof(path), "%s/basic_config.yaml", corpus_dir());
	cr_assert_eq(envoy_config_load(&cfg, path, false, &err), 0);
	d = dom("test-domain");
	cr_assert(none(d, ""));
	cr_assert(none(d, "key1=value1"));
	cr_assert(none(d, "key1=something"));
	cr_assert_eq(rpu(d, "key1=value1,subkey1=something"), 5);
	cr_assert_eq(lim(d, "key1=value1,subkey1=something", &m)->unit, RLS_UNIT_SECOND);
	cr_assert_eq(rpu(d, "key1=value1,subkey1=subvalue1"), 10);
	cr_assert_eq(rpu(d, "key2=something"), 20);
	cr_assert_eq(lim(d, "key2=something", &m)->unit, RLS_UNIT_MINUTE);
	cr_assert_eq(rpu(d, "key2=value2"), 30);
	cr_assert(none(d, "key2=value3"), "a value without a limit: whitelisted");
	cr_assert_eq(rpu(d, "key3=foo"), 1);
	cr_assert_eq(lim(d, "key3=foo", &m)->unit, RLS_UNIT_HOUR);
	cr_assert_str_eq(lim(d, "key4=foo", &m)->name, "key4_rate_limit");
	cr_assert(lim(d, "key6=foo", &m)->unlimited);
	cr_assert_eq(rpu(d, "key5=value5"), 15);
	cr_assert_eq(rpu(d, "key5=value5,subkey5=subvalue5"), 25);
	cr_assert(lim(d, "key7=unspecified_value", &m)->detailed_metric);
	cr_assert(none(d, "key2=value2,subkey=x"), "deeper than the tree");
}

Test(corpus, wildcard_and_share_threshold)
{
	char path[1024];
	const struct envoy_domain *d;

	NEED_CORPUS();
	snprintf(path, sizeof(path), "%s/wildcard.yaml", corpus_dir());
	cr_assert_eq(envoy_config_load(&cfg, path, false, &err), 0);
	d = dom("test-domain");
	cr_assert_eq(rpu(d, "wild=foo1"), 20);
	cr_assert_eq(rpu(d, "wild=foo"), 20);
	cr_assert(none(d, "wild=fo"));
	cr_assert(none(d, "noWild=foo1"));
	cr_assert_eq(rpu(d, "noWild=foo"), 20);
	cr_assert_eq(rpu(d, "noVal=anything"), 20);
	cr_assert_eq(rpu(d, "midWild=barab"), 20);
	cr_assert(none(d, "midWild=bar"));
	cr_assert_eq(rpu(d, "multiWild=foo1bar2baz"), 10);
	cr_assert(none(d, "multiWild=foobaz"));
	cr_assert_eq(rpu(d, "nestedWild=val1,wild=goo2"), 20);
	cr_assert(none(d, "nestedWild=val2,wild=goo2"));
	reset();
	snprintf(path, sizeof(path), "%s/share_threshold.yaml", corpus_dir());
	cr_assert_eq(envoy_config_load(&cfg, path, false, &err), 0);
	d = dom("test-domain");
	cr_assert_str_eq(key_of(d, "files=files/a"), "files=files/*");
	cr_assert_str_eq(key_of(d, "files=files/b"), "files=files/*");
	cr_assert_eq(rpu(d, "file=test1"), 50, "an exact value before a wildcard");
	cr_assert_eq(rpu(d, "file=test2"), 100);
	cr_assert_str_eq(key_of(d, "file=test1"), "file=test1");
	cr_assert_str_eq(key_of(d, "file=test2"), "file=test*");
	cr_assert_str_eq(key_of(d, "files=top/x,files=nested/y"), "files=top/*&files=nested/*");
	cr_assert_str_eq(key_of(d, "path=path/1,file=file/2,type=t"), "path=path/*&file=file/2&type=t");
	cr_assert_str_eq(key_of(d, "midpath=/api/xv1"), "midpath=/api*v1");
}

/* ---- the matcher's precedence, on our own tree ---- */

static const char prec[] =
	"domain: p\n"
	"descriptors:\n"
	"  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n"
	"  - {key: k, value: ab*, rate_limit: {unit: second, requests_per_unit: 2}}\n"
	"  - {key: k, value: a*, rate_limit: {unit: second, requests_per_unit: 3}}\n"
	"  - {key: k, value: abc, rate_limit: {unit: second, requests_per_unit: 4}}\n"
	"  - key: k\n"
	"    value: nest\n"
	"    rate_limit: {unit: second, requests_per_unit: 6}\n"
	"    descriptors:\n"
	"      - {key: s, rate_limit: {unit: second, requests_per_unit: 7}}\n"
	"  - key: j\n"
	"    descriptors:\n"
	"      - {key: s, value: '*', rate_limit: {unit: second, requests_per_unit: 8}}\n";

Test(match, exact_then_wildcard_in_order_then_key_only)
{
	const struct envoy_domain *d;

	cr_assert_eq(load("p.yaml", prec), 0, "%s", err.msg);
	d = dom("p");
	cr_assert_eq(rpu(d, "k=abc"), 4, "exact first");
	cr_assert_eq(rpu(d, "k=abd"), 2, "the first wildcard in the file's order");
	cr_assert_eq(rpu(d, "k=ax"), 3);
	cr_assert_eq(rpu(d, "k=zz"), 1, "key only last");
	cr_assert_eq(rpu(d, "k="), 1, "an empty value is \"k_\": the key-only node");
	cr_assert_eq(rpu(d, "k=nest"), 6, "a node with children has its own limit");
	cr_assert_eq(rpu(d, "k=nest,s=1"), 7);
	cr_assert(none(d, "k=abc,s=1"), "a leaf before the last entry: none");
	cr_assert(none(d, "k=nest,s=1,t=2"), "deeper than the tree: none");
	cr_assert(none(d, "j=1"), "a node without a limit at the last entry: none");
	cr_assert_eq(rpu(d, "j=1,s=anything"), 8);
	cr_assert(none(d, "x=1"));
	cr_assert(none(d, "K=abc"), "case-sensitive");
	{
		struct envoy_match m;
		char tiny[4];
		struct rls_entry e = { { "k", 1 }, { "abc", 3 } };

		cr_assert(!envoy_match(d, &e, 1, tiny, sizeof(tiny), &m), "no room for the name");
		cr_assert(!envoy_match(d, &e, 0, scratch, sizeof(scratch), &m));
	}
}

/* ---- keys ---- */

Test(keys, stable_and_distinct)
{
	const struct envoy_domain *d;
	static const char *const distinct[] = {
		"k=a&b", "k=a,k=b", "k=a=b", "k=a%26b", "k=a%b", "k=ab", "k=a,s=b",
	};
	char seen[NELEM(distinct)][128];

	cr_assert_eq(load("k.yaml",
			  "domain: k\ndescriptors:\n"
			  "  - {key: k, rate_limit: {unit: second, requests_per_unit: 1},\n"
			  "     descriptors: [{key: k, rate_limit: {unit: second}},\n"
			  "                   {key: s, rate_limit: {unit: second}}]}\n"), 0, "%s", err.msg);
	d = dom("k");
	cr_assert_str_eq(key_of(d, "k=10.0.0.1"), "k=10.0.0.1");
	cr_assert_str_eq(key_of(d, "k=10.0.0.1"), "k=10.0.0.1", "stable");
	cr_assert_str_eq(key_of(d, "k=a&b"), "k=a%26b");
	cr_assert_str_eq(key_of(d, "k=a=b"), "k=a%3Db");
	cr_assert_str_eq(key_of(d, "k=a,k=b"), "k=a&k=b");
	for (size_t i = 0; i < NELEM(distinct); i++) {
		snprintf(seen[i], sizeof(seen[i]), "%s", key_of(d, distinct[i]));
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(seen[i], seen[j], "%s and %s share %s", distinct[i],
					  distinct[j], seen[i]);
	}
	/* control bytes escaped; an override's key (no match) from the values */
	{
		struct rls_entry e[2] = { { { "a\n", 2 }, { "\x7f", 1 } }, { { "b", 1 }, { "", 0 } } };
		char out[64];
		long n = envoy_match_key(NULL, e, 2, out, sizeof(out));

		cr_assert_eq(n, 11);
		cr_assert_eq(memcmp(out, "a%0A=%7F&b=", 11), 0);
		cr_assert_eq(envoy_match_key(NULL, e, 2, out, 10), -1, "does not fit");
	}
}

/* A key over RL_STORED_KEY_MAX bytes is made whole (the library digests
 * it as any other long key): never cut, so two long values stay apart. */
Test(keys, long_keys_whole)
{
	const struct envoy_domain *d;
	char desc[400], first[400];

	cr_assert_eq(load("l.yaml", "domain: l\ndescriptors:\n  - {key: path, rate_limit: {unit: second}}\n"),
		     0);
	d = dom("l");
	memset(desc, 0, sizeof(desc));
	strcpy(desc, "path=");
	memset(desc + 5, 'x', 200);
	snprintf(first, sizeof(first), "%s", key_of(d, desc));
	cr_assert_eq(strlen(first), 205);
	cr_assert_gt(strlen(first), RL_STORED_KEY_MAX);
	desc[204] = 'y';
	cr_assert_str_neq(key_of(d, desc), first);
}

/* ---- the "envoy_config" key (agent/config_envoy.c) ---- */

TestSuite(key);

static char tmpdir[64];

/* A folder with config.json (json) and envoy/NAME.yaml files. */
static void setup_dir(const char *json, const char *const *yaml, size_t n)
{
	char f[160];
	FILE *out;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/envoykeyXXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	snprintf(f, sizeof(f), "%s/envoy", tmpdir);
	cr_assert_eq(mkdir(f, 0700), 0);
	for (size_t i = 0; i < n; i++) {
		snprintf(f, sizeof(f), "%s/envoy/%zu.yaml", tmpdir, i);
		out = fopen(f, "w");
		fputs(yaml[i], out);
		fclose(out);
	}
	snprintf(f, sizeof(f), "%s/config.json", tmpdir);
	out = fopen(f, "w");
	fputs(json, out);
	fclose(out);
}

static int load_dir(struct config *c, struct config_err *e)
{
	char f[160];

	snprintf(f, sizeof(f), "%s/config.json", tmpdir);
	config_defaults(c);
	return config_load(c, f, e);
}

static void rm_dir(void)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	cr_assert_eq(system(cmd), 0);
}

static const char *const two_domains[] = {
	"domain: edge\ndescriptors:\n"
	"  - {key: ip, rate_limit: {unit: minute, requests_per_unit: 10}}\n"
	"  - {key: user, rate_limit: {window: 90, requests_per_unit: 5, delay_max_ms: 200}}\n",
	"domain: api\ndescriptors:\n  - {key: path, rate_limit: {unit: second, requests_per_unit: 2}}\n",
};

/* A domain takes the namespace of its name (its settings kept, its window
 * sizes left out or completed); another becomes a namespace of defaults. */
Test(key, domains_become_namespaces)
{
	struct config c;
	struct config_err e;
	int edge, api;

	setup_dir("{\"envoy_config\": \"envoy\", \"namespaces\": ["
		  "{\"name\": \"edge\", \"count_denied\": false},"
		  "{\"name\": \"plain\", \"window_sizes\": [10]}]}", two_domains, 2);
	cr_assert_eq(load_dir(&c, &e), 0, "%s: %s: %s", e.file, e.path, e.msg);
	edge = config_ns_find(&c, "edge", 4);
	api = config_ns_find(&c, "api", 3);
	cr_assert(edge >= 0 && api >= 0 && c.n_ns == 3);
	cr_assert(!c.ns[edge].count_denied, "its own settings kept");
	cr_assert_eq(c.ns[edge].n_window_sizes, 2);
	cr_assert(ns_window_index(&c.ns[edge], 60) >= 0 && ns_window_index(&c.ns[edge], 90) >= 0);
	cr_assert_eq(c.ns[edge].delay_max_ms, 200, "raised to its limits' holds");
	cr_assert_not_null(c.ns[edge].envoy);
	cr_assert_str_eq(c.ns[edge].envoy->name, "edge");
	cr_assert_eq(c.ns[api].n_window_sizes, 1);
	cr_assert_eq(c.ns[api].window_sizes[0], 1);
	cr_assert_str_eq(c.ns[api].strategy, "local");
	cr_assert_null(c.ns[config_ns_find(&c, "plain", 5)].envoy);
	config_free(&c);
	rm_dir();
}

/* Listed window sizes stay, a domain's are added; merge_domains. */
Test(key, windows_added_and_merge)
{
	struct config c;
	struct config_err e;
	static const char *const twice[] = {
		"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n",
		"domain: d\ndescriptors:\n  - {key: b, rate_limit: {unit: hour, requests_per_unit: 1}}\n",
	};

	setup_dir("{\"envoy_config\": {\"path\": \"envoy\", \"merge_domains\": true},"
		  "\"namespaces\": [{\"name\": \"d\", \"window_sizes\": [1, 7]}]}", twice, 2);
	cr_assert_eq(load_dir(&c, &e), 0, "%s: %s: %s", e.file, e.path, e.msg);
	cr_assert_eq(c.ns[0].n_window_sizes, 3);
	cr_assert_eq(c.ns[0].window_sizes[2], 3600);
	cr_assert_eq(c.ns[0].envoy->n_files, 2);
	config_free(&c);
	rm_dir();
	/* the same without merge_domains: refused, in the later file */
	setup_dir("{\"envoy_config\": \"envoy\"}", twice, 2);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert(strstr(e.msg, "duplicate domain 'd' in config file"), "%s", e.msg);
	cr_assert(strstr(e.file, "envoy/1.yaml"), "%s", e.file);
	rm_dir();
}

/* What is refused, and where it says so. */
Test(key, refusals)
{
	struct config c;
	struct config_err e;
	static const char *const bad[] = { "domain: d\ndescriptors:\n  - key: a\n"
					   "    rate_limit: {unit: fortnight}\n" };

	/* a YAML refusal names the YAML file and line */
	setup_dir("{\"envoy_config\": \"envoy/0.yaml\"}", bad, 1);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert(strstr(e.file, "envoy/0.yaml") && strcmp(e.path, "line 4, column 17") == 0,
		  "%s %s", e.file, e.path);
	cr_assert_str_eq(e.msg, "invalid rate limit unit 'fortnight'");
	rm_dir();
	/* a namespace without window_sizes needs a domain of its name */
	setup_dir("{\"envoy_config\": \"envoy\", \"namespaces\": [{\"name\": \"other\"}]}",
		  two_domains, 2);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert_str_eq(e.path, "namespaces[0].window_sizes");
	cr_assert(strstr(e.msg, "no envoy_config domain is named \"other\""), "%s", e.msg);
	rm_dir();
	/* without envoy_config, as before */
	setup_dir("{\"namespaces\": [{\"name\": \"other\"}]}", NULL, 0);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert_str_eq(e.path, "namespaces[0].window_sizes");
	rm_dir();
	/* the namespace's delay bound under its domain's: raised, not refused;
	 * a namespace with 8 windows that a domain would give a ninth */
	setup_dir("{\"envoy_config\": \"envoy\", \"namespaces\": [{\"name\": \"api\","
		  "\"window_sizes\": [2, 3, 4, 5, 6, 7, 8, 9]}]}", two_domains, 2);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert_str_eq(e.path, "namespaces[0].window_sizes");
	cr_assert(strstr(e.msg, "adds window 1 s"), "%s", e.msg);
	rm_dir();
	/* a missing path, a path of the wrong type, an object without path */
	setup_dir("{\"envoy_config\": \"nowhere\"}", NULL, 0);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert(strstr(e.msg, "cannot open"), "%s", e.msg);
	rm_dir();
	setup_dir("{\"envoy_config\": 5}", NULL, 0);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert_str_eq(e.path, "envoy_config");
	rm_dir();
	setup_dir("{\"envoy_config\": {\"merge_domains\": true}}", NULL, 0);
	cr_assert_eq(load_dir(&c, &e), -1);
	cr_assert_str_eq(e.path, "envoy_config.path");
	rm_dir();
}
