/*
 * test_limits.c - the table of limits per key set at run time
 * (agent/limits.h): set, read, replaced and removed; the bound of each
 * namespace and of the table; removals and re-adds far past the table's
 * size (tombstones rebuilt away); a store's set applied whole; paging;
 * the part of a state file after the counters (kept across a restart,
 * made again for another total, refused when it is not one); readers in
 * another process while one writes.
 */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/limits.h"
#include "agent/ratelimit.h"
#include "agent/shm.h"

static struct limits *mk(size_t total)
{
	char err[256] = "";
	struct limits *l = limits_create(total, err, sizeof(err));

	cr_assert_not_null(l, "%s", err);
	return l;
}

static int put(struct limits *l, unsigned ns, uint32_t w, const char *key, int64_t v,
	       size_t bound)
{
	return limits_put(l, ns, w, key, strlen(key), v, bound, NULL);
}

static int64_t get(const struct limits *l, unsigned ns, uint32_t w, const char *key)
{
	return limits_get(l, ns, w, key, strlen(key), -7);
}

Test(limits, set_read_replace_remove)
{
	struct limits *l = mk(16);
	bool added = false;

	cr_assert_eq(get(l, 0, 60, "a"), -7, "none: the default");
	cr_assert_eq(limits_put(l, 0, 60, "a", 1, 2, 16, &added), 0);
	cr_assert(added);
	cr_assert_eq(get(l, 0, 60, "a"), 2);
	/* Another window, namespace or key is another override. */
	cr_assert_eq(get(l, 0, 3600, "a"), -7);
	cr_assert_eq(get(l, 1, 60, "a"), -7);
	cr_assert_eq(get(l, 0, 60, "b"), -7);
	cr_assert_eq(limits_get(l, 0, 60, "a\0", 2, -7), -7, "a key's length is its own");
	/* Replaced in place: not one more. */
	cr_assert_eq(limits_put(l, 0, 60, "a", 1, 1000, 16, &added), 0);
	cr_assert_not(added);
	cr_assert_eq(get(l, 0, 60, "a"), 1000);
	cr_assert_eq(limits_count(l, 0), 1);
	/* A limit of 0 is a limit. */
	cr_assert_eq(put(l, 0, 60, "z", 0, 16), 0);
	cr_assert_eq(get(l, 0, 60, "z"), 0);
	cr_assert_eq(limits_del(l, 0, 60, "a", 1), 1);
	cr_assert_eq(limits_del(l, 0, 60, "a", 1), 0, "gone already");
	cr_assert_eq(get(l, 0, 60, "a"), -7);
	cr_assert_eq(limits_count(l, 0), 1);
	/* Out of range: refused, nothing set. */
	cr_assert_eq(put(l, 0, 0, "a", 1, 16), LIMITS_ERR_ARG);
	cr_assert_eq(put(l, 0, 60, "", 1, 16), LIMITS_ERR_ARG);
	cr_assert_eq(put(l, 0, 60, "a", -1, 16), LIMITS_ERR_ARG);
	cr_assert_eq(put(l, LIMITS_NS, 60, "a", 1, 16), LIMITS_ERR_ARG);
	char big[LIMITS_KEY_MAX + 1];
	memset(big, 'k', sizeof(big));
	cr_assert_eq(limits_put(l, 0, 60, big, sizeof(big), 1, 16, NULL), LIMITS_ERR_ARG);
	cr_assert_eq(limits_put(l, 0, 60, big, LIMITS_KEY_MAX, 9, 16, NULL), 0, "104 bytes fit");
	cr_assert_eq(limits_get(l, 0, 60, big, LIMITS_KEY_MAX, -1), 9);
	limits_destroy(l);
}

/* Each namespace holds at most its bound; the table at most its total;
 * both say which, and a replacement needs no room. */
Test(limits, bounded_per_namespace_and_in_all)
{
	struct limits *l = mk(5);
	char k[16];

	for (int i = 0; i < 3; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		cr_assert_eq(put(l, 0, 60, k, i, 3), 0);
	}
	cr_assert_eq(put(l, 0, 60, "one-more", 1, 3), LIMITS_ERR_NS_FULL);
	cr_assert_eq(put(l, 0, 60, "k1", 77, 3), 0, "a replacement needs no room");
	cr_assert_eq(get(l, 0, 60, "k1"), 77);
	cr_assert_eq(put(l, 1, 60, "x", 1, 3), 0);
	cr_assert_eq(put(l, 1, 60, "y", 1, 3), 0);
	cr_assert_eq(put(l, 1, 60, "z", 1, 3), LIMITS_ERR_FULL, "the table's 5 are taken");
	cr_assert_str_eq(limits_err_str(LIMITS_ERR_NS_FULL),
			 "the namespace holds max_limit_overrides overrides already");
	cr_assert_eq(limits_del(l, 0, 60, "k0", 2), 1);
	cr_assert_eq(put(l, 1, 60, "z", 1, 3), 0, "room again");
	cr_assert_eq(limits_count(l, 0), 2);
	cr_assert_eq(limits_count(l, 1), 3);
	limits_destroy(l);
}

/* Thousands of removals and re-adds in a table of 8 keep every lookup
 * right (entries moved back over the removed) and never fill it. */
Test(limits, churn_far_past_the_size)
{
	struct limits *l = mk(8);
	char k[32];

	for (int i = 0; i < 5000; i++) {
		snprintf(k, sizeof(k), "churn-%d", i);
		cr_assert_eq(put(l, 2, 60, k, i, 8), 0, "put %d", i);
		cr_assert_eq(get(l, 2, 60, k), i);
		if (i >= 7) {
			snprintf(k, sizeof(k), "churn-%d", i - 7);
			cr_assert_eq(limits_del(l, 2, 60, k, strlen(k)), 1, "del %d", i - 7);
			cr_assert_eq(get(l, 2, 60, k), -7);
		}
	}
	cr_assert_eq(limits_count(l, 2), 7);
	for (int i = 4993; i < 5000; i++) {
		snprintf(k, sizeof(k), "churn-%d", i);
		cr_assert_eq(get(l, 2, 60, k), i);
	}
	limits_destroy(l);
}

/* A store's overrides replace a namespace's whole (set, changed, gone),
 * up to the bound (the first by window, then key); the other namespaces
 * are left alone. */
Test(limits, replace_makes_the_store_s_set)
{
	struct limits *l = mk(32);
	struct limits_entry e[4] = {
		{ .window = 60, .limit = 5, .len = 1, .key = "a" },
		{ .window = 60, .limit = 6, .len = 1, .key = "b" },
		{ .window = 3600, .limit = 7, .len = 1, .key = "a" },
		{ .window = 60, .limit = 8, .len = 1, .key = "c" },
	};
	size_t kept = 0;

	cr_assert_eq(put(l, 0, 60, "a", 1, 10), 0);
	cr_assert_eq(put(l, 0, 60, "gone", 1, 10), 0);
	cr_assert_eq(put(l, 1, 60, "other", 1, 10), 0);
	cr_assert_eq(limits_replace(l, 0, e, 4, 3, &kept), 0);
	cr_assert_eq(kept, 3, "the bound: 3 of 4");
	cr_assert_eq(limits_count(l, 0), 3);
	cr_assert_eq(get(l, 0, 60, "a"), 5);
	cr_assert_eq(get(l, 0, 60, "b"), 6);
	cr_assert_eq(get(l, 0, 60, "c"), 8);
	cr_assert_eq(get(l, 0, 3600, "a"), -7, "past the bound");
	cr_assert_eq(limits_replace(l, 0, e, 4, 10, &kept), 0);
	cr_assert_eq(kept, 4);
	cr_assert_eq(get(l, 0, 3600, "a"), 7);
	cr_assert_eq(get(l, 0, 60, "gone"), -7);
	cr_assert_eq(get(l, 1, 60, "other"), 1, "another namespace's stays");
	cr_assert_eq(limits_replace(l, 0, NULL, 0, 3, &kept), 0);
	cr_assert_eq(limits_count(l, 0), 0);
	cr_assert_eq(limits_version(l, 0), LIMITS_VERSION_UNKNOWN, "nothing applied yet");
	limits_set_version(l, 0, 42);
	cr_assert_eq(limits_version(l, 0), 42);
	limits_destroy(l);
}

/* Pages of n list every override of a namespace once, and no other's. */
Test(limits, paged_list)
{
	struct limits *l = mk(300);
	struct limits_entry e[100];
	char k[32], seen[250] = { 0 };
	uint64_t pos = 0;
	size_t total = 0, pages = 0;

	for (int i = 0; i < 250; i++) {
		snprintf(k, sizeof(k), "t%d", i);
		cr_assert_eq(put(l, 3, 60, k, 1000 + i, 250), 0);
	}
	cr_assert_eq(put(l, 4, 60, "not-mine", 1, 250), 0);
	do {
		size_t n = limits_list(l, 3, &pos, e, 100);
		pages++;
		for (size_t i = 0; i < n; i++) {
			char name[LIMITS_KEY_MAX + 1];
			memcpy(name, e[i].key, e[i].len);
			name[e[i].len] = '\0';
			int id = atoi(name + 1);
			cr_assert_eq(name[0], 't');
			cr_assert_eq(e[i].window, 60);
			cr_assert_eq(e[i].limit, 1000 + id);
			cr_assert_eq(seen[id], 0, "t%d listed twice", id);
			seen[id] = 1;
			total++;
		}
	} while (pos != 0);
	cr_assert_eq(total, 250);
	cr_assert_eq(pages, 3);
	limits_destroy(l);
}

/* Readers in another process see every write whole: the limit of a key
 * is always one the writer set for it (k * 1000 + something), never a
 * torn one, and a key nobody touches is always found, while the writer
 * inserts and removes (moving entries back) under them, but for the calls
 * that gave up on a writer preempted mid-change (limits_gave_up: the
 * reader never waits; on a busy machine the writer can be off its CPU for
 * a scheduling slice) - each of those answered the configured limit. */
Test(limits, readers_in_another_process)
{
	struct limits *l = mk(64);
	pid_t pid;

	cr_assert_eq(put(l, 0, 60, "steady", 5, 64), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char k[16];
		for (int i = 0; i < 20000; i++) {
			snprintf(k, sizeof(k), "w%d", i % 50);
			if (i % 3 == 2)
				limits_del(l, 0, 60, k, strlen(k));
			else
				put(l, 0, 60, k, (i % 50) * 1000 + i % 7, 64);
		}
		_exit(0);
	}
	int status, torn = 0, missed = 0;
	uint64_t gave_up = limits_gave_up();
	for (int i = 0; i < 200000 && waitpid(pid, &status, WNOHANG) == 0; i++) {
		char k[16];
		snprintf(k, sizeof(k), "w%d", i % 50);
		int64_t v = get(l, 0, 60, k);
		if (v != -7 && v / 1000 != i % 50)
			torn++;
		if (get(l, 0, 60, "steady") != 5)
			missed++;
	}
	waitpid(pid, &status, 0);
	gave_up = limits_gave_up() - gave_up;
	cr_assert_eq(torn, 0);
	cr_assert_leq((uint64_t)missed, gave_up, "%d reads missed the steady key, %llu gave up",
		      missed, (unsigned long long)gave_up);
	limits_destroy(l);
}

/* ---- a state file's part ---- */

static void state_path(char *dir, char *path, size_t len)
{
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, len, "%s/state", dir);
}

/* A table with a state file, and its overrides after it. */
static struct shm_table *open_both(const char *path, size_t total, struct limits **l,
				   size_t *dropped)
{
	char err[256] = "";
	struct shm_table *t = shm_open_file(path, 64, err, sizeof(err));

	cr_assert_not_null(t, "%s", err);
	*l = limits_open_file(shm_state_fd(t), shm_bytes(t), total, dropped, err, sizeof(err));
	cr_assert_not_null(*l, "%s", err);
	return t;
}

Test(limits, kept_in_the_state_file)
{
	char dir[] = "/tmp/test_limits-XXXXXX", path[64], err[256];
	struct limits *l;
	size_t dropped = 9;
	struct shm_table *t = open_both((state_path(dir, path, sizeof(path)), path), 10, &l,
					&dropped);

	cr_assert_eq(dropped, 0);
	for (int i = 0; i < 6; i++) {
		char k[8];
		snprintf(k, sizeof(k), "k%d", i);
		cr_assert_eq(put(l, i % 2, 60, k, 100 + i, 10), 0);
	}
	limits_set_version(l, 0, 12);
	limits_destroy(l);
	shm_destroy(t);

	/* The same total: mapped again, every override kept, the versions
	 * the store's to say again. */
	t = open_both(path, 10, &l, &dropped);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(limits_count(l, 0), 3);
	cr_assert_eq(limits_count(l, 1), 3);
	cr_assert_eq(get(l, 1, 60, "k5"), 105);
	cr_assert_eq(limits_version(l, 0), LIMITS_VERSION_UNKNOWN);
	limits_destroy(l);
	shm_destroy(t);

	/* Another total: made again, with what fits (4 of 6). */
	t = open_both(path, 4, &l, &dropped);
	cr_assert_eq(dropped, 2);
	cr_assert_eq(limits_count(l, 0) + limits_count(l, 1), 4);
	limits_destroy(l);
	shm_destroy(t);
	t = open_both(path, 100, &l, &dropped);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(limits_count(l, 0) + limits_count(l, 1), 4);
	limits_destroy(l);

	/* A slot the file says holds 127 key bytes (past the 104 a slot
	 * has), and one of window 0: dropped, the others kept. */
	shm_destroy(t);
	t = open_both(path, 100, &l, &dropped);
	limits_destroy(l);
	uint64_t bad[16] = { 1ULL << 62 | 127ULL << 50 | 60, 3 };
	uint64_t zero[16] = { 1ULL << 62 | 1ULL << 50 | 0, 3, 'x' };
	/* Two slots no override holds (where the 4 are depends on the
	 * table's random seed). */
	off_t free_at[2];
	int nfree = 0;
	for (off_t o = (off_t)shm_bytes(t) + 4096; nfree < 2; o += 128) {
		uint64_t id = 1;
		cr_assert_eq(pread(shm_state_fd(t), &id, sizeof(id), o), (ssize_t)sizeof(id));
		if (id == 0)
			free_at[nfree++] = o;
	}
	cr_assert_eq(pwrite(shm_state_fd(t), bad, sizeof(bad), free_at[0]), 128);
	cr_assert_eq(pwrite(shm_state_fd(t), zero, sizeof(zero), free_at[1]), 128);
	shm_destroy(t);
	t = open_both(path, 100, &l, &dropped);
	cr_assert_eq(dropped, 1, "window 0 (the length is not a slot's: never read)");
	cr_assert_eq(limits_count(l, 0) + limits_count(l, 1), 4);
	limits_destroy(l);

	/* A part that is not one: refused, the file left as it is. */
	int fd = shm_state_fd(t);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(pwrite(fd, "garbage!", 8, (off_t)shm_bytes(t)), 8);
	cr_assert_null(limits_open_file(fd, shm_bytes(t), 100, &dropped, err, sizeof(err)));
	cr_assert_not_null(strstr(err, "damaged"), "%s", err);
	struct stat st2;
	cr_assert_eq(fstat(fd, &st2), 0);
	cr_assert_eq(st.st_size, st2.st_size);
	shm_destroy(t);
	unlink(path);
	rmdir(dir);
}

/* The library's way in: rl_limit_of answers the configured limit
 * without a table, and a key's override (its stored form: a long key's
 * digest) with one. */
Test(limits, through_the_library)
{
	char err[256] = "", longkey[300];
	struct rl *rl = rl_new("t", 1024, err, sizeof(err));
	struct ns_def d;
	struct rl_skey sk, lk;
	size_t dropped;

	cr_assert_not_null(rl, "%s", err);
	ns_def_init(&d);
	snprintf(d.name, sizeof(d.name), "api");
	d.window_sizes[0] = 60;
	d.n_window_sizes = 1;
	cr_assert_eq(rl_new_namespace(rl, &d, err, sizeof(err)), 0, "%s", err);
	rl_skey_make(rl, "k", 1, &sk);
	cr_assert_eq(rl_limit_of(rl, 0, 60, &sk, 5), 5, "no table: the configured limit");
	cr_assert_eq(rl_limits_open(rl, 8, &dropped, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(rl_limit_of(rl, 0, 60, &sk, 5), 5);
	cr_assert_eq(limits_put(rl_limits(rl), rl_shm_ns(rl, 0), 60, "k", 1, 50, 8, NULL), 0);
	cr_assert_eq(rl_limit_of(rl, 0, 60, &sk, 5), 50);
	memset(longkey, 'L', sizeof(longkey));
	rl_skey_make(rl, longkey, sizeof(longkey), &lk);
	cr_assert(lk.digested);
	cr_assert_eq(limits_put(rl_limits(rl), rl_shm_ns(rl, 0), 60, rl_skey_bytes(&lk), lk.len,
				3, 8, NULL), 0);
	cr_assert_eq(rl_limit_of(rl, 0, 60, &lk, 5), 3);
	rl_free(rl);
}
