/*
 * test_log.c - the logging module: level parsing and filtering (arguments
 * are not evaluated below the level), the exact line format, one write per
 * line (lines from several processes on one pipe never interleave), long
 * and multi-line messages, control and non-ASCII bytes escaped (a line is
 * printable ASCII), errno preservation, and the hand-made UTC
 * timestamp against gmtime_r.
 */
#include "agent/log.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* stderr is redirected to a temporary file between capture_start() and
 * capture_end(), which returns what was written (NUL-terminated, static). */
static int saved_stderr = -1;
static FILE *capture_file;
static char captured[16384];

static void capture_start(void)
{
	capture_file = tmpfile();
	cr_assert_not_null(capture_file);
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	cr_assert_geq(saved_stderr, 0);
	cr_assert_geq(dup2(fileno(capture_file), STDERR_FILENO), 0);
}

static const char *capture_end(void)
{
	size_t n;

	fflush(stderr);
	cr_assert_geq(dup2(saved_stderr, STDERR_FILENO), 0);
	close(saved_stderr);
	saved_stderr = -1;
	rewind(capture_file);
	n = fread(captured, 1, sizeof(captured) - 1, capture_file);
	captured[n] = '\0';
	fclose(capture_file);
	capture_file = NULL;
	return captured;
}

static void reset(void)
{
	log_level = LOG_INFO;
	log_worker_id = -1;
}

TestSuite(log, .init = reset);

Test(log, defaults)
{
	cr_assert_eq(log_level, LOG_INFO);
	cr_assert_eq(log_worker_id, -1);
}

Test(log, level_parse)
{
	cr_assert_eq(log_level_parse("err"), LOG_ERR);
	cr_assert_eq(log_level_parse("warn"), LOG_WARN);
	cr_assert_eq(log_level_parse("info"), LOG_INFO);
	cr_assert_eq(log_level_parse("debug"), LOG_DEBUG);
	cr_assert_eq(log_level_parse("DEBUG"), -1);
	cr_assert_eq(log_level_parse("error"), -1);
	cr_assert_eq(log_level_parse(""), -1);
	cr_assert_eq(log_level_parse("info "), -1);
	cr_assert_eq(log_level_parse(NULL), -1);
}

static int evaluations;

static int count_evaluation(void)
{
	return ++evaluations;
}

Test(log, filtered_arguments_are_not_evaluated)
{
	const char *out;

	log_level = LOG_WARN;
	evaluations = 0;
	capture_start();
	LOG(LOG_DEBUG, "debug %d", count_evaluation());
	LOG(LOG_INFO, "info %d", count_evaluation());
	out = capture_end();
	cr_assert_eq(evaluations, 0);
	cr_assert_str_empty(out);

	capture_start();
	LOG(LOG_WARN, "warn %d", count_evaluation());
	LOG(LOG_ERR, "err %d", count_evaluation());
	out = capture_end();
	cr_assert_eq(evaluations, 2);
	cr_assert_not_null(strstr(out, "warn: warn 1\n"), "%s", out);
	cr_assert_not_null(strstr(out, "err: err 2\n"), "%s", out);

	log_level = LOG_DEBUG;
	capture_start();
	LOG(LOG_DEBUG, "debug %d", count_evaluation());
	out = capture_end();
	cr_assert_eq(evaluations, 3);
	cr_assert_not_null(strstr(out, "debug: debug 3\n"), "%s", out);
}

Test(log, log_write_filters_too)
{
	log_level = LOG_ERR;
	capture_start();
	log_write(LOG_WARN, "dropped");
	cr_assert_str_empty(capture_end());
}

/* Matches one whole line; returns the pid it shows. */
static long match_line(const char *line, const char *who, const char *level, const char *msg)
{
	char pattern[512];
	regex_t re;
	regmatch_t m[2];
	int rc;

	snprintf(pattern, sizeof(pattern),
		 "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
		 "\\[pid ([0-9]+) %s\\] %s: %s\n$", who, level, msg);
	cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED), 0);
	rc = regexec(&re, line, 2, m, 0);
	regfree(&re);
	cr_assert_eq(rc, 0, "line %s does not match %s", line, pattern);
	return strtol(line + m[1].rm_so, NULL, 10);
}

Test(log, line_format_worker)
{
	const char *out;

	log_worker_id = 0;
	capture_start();
	log_write(LOG_WARN, "hello %s %d", "world", 42);
	out = capture_end();
	cr_assert_eq(match_line(out, "w0", "warn", "hello world 42"), (long)getpid());

	log_worker_id = 17;
	capture_start();
	LOG(LOG_ERR, "x");
	out = capture_end();
	cr_assert_eq(match_line(out, "w17", "err", "x"), (long)getpid());
}

Test(log, line_format_master)
{
	const char *out;

	capture_start();
	LOG(LOG_INFO, "listening on %s", "127.0.0.1:12345");
	out = capture_end();
	cr_assert_eq(match_line(out, "m", "info", "listening on 127\\.0\\.0\\.1:12345"),
		     (long)getpid());
}

Test(log, timestamp_is_now)
{
	time_t before, after;
	struct tm tm;
	char want[LOG_TIME_LEN];
	const char *out;
	int tries;

	/* Retry if a second boundary falls between the two clock reads. */
	for (tries = 0; tries < 5; tries++) {
		before = time(NULL);
		capture_start();
		LOG(LOG_INFO, "t");
		out = capture_end();
		after = time(NULL);
		if (before == after)
			break;
	}
	cr_assert_eq(before, after);
	gmtime_r(&before, &tm);
	strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%S", &tm);
	cr_assert_eq(strncmp(out, want, 19), 0, "%s vs %s", out, want);
}

Test(log, newlines_do_not_split_lines)
{
	const char *out;

	capture_start();
	LOG(LOG_INFO, "a\nb\r\nc\n");
	LOG(LOG_INFO, "second\n");
	out = capture_end();
	cr_assert_not_null(strstr(out, "info: a b  c\n"), "%s", out);
	cr_assert_not_null(strstr(out, "info: second\n"), "%s", out);
	cr_assert_null(strstr(out, "\n\n"), "%s", out);
}

/* A store's error text (a Redis error reply, a PostgreSQL message) is
 * logged as the store gave it: terminal controls must not reach the log. */
Test(log, control_characters_are_escaped)
{
	const char *out;
	static char big[4000];

	capture_start();
	LOG(LOG_WARN, "redis store: %s", "ERR \x1b[31mred\x07 bell\x7f\tend");
	memset(big, '\x1b', sizeof(big) - 1);
	LOG(LOG_WARN, "%s", big);
	out = capture_end();
	cr_assert_not_null(strstr(out, "warn: redis store: ERR \\x1b[31mred\\x07 bell\\x7f end\n"),
			   "%s", out);
	cr_assert_null(strchr(out, '\x1b'), "%s", out);
	cr_assert_null(strchr(out, '\x07'), "%s", out);
	/* A line of escapes is cut, still one line within the limit. */
	const char *second = strchr(out, '\n') + 1;
	size_t n = strcspn(second, "\n");
	cr_assert_leq(n + 1, 2048);
	cr_assert_eq(strncmp(second + n - 3, "...", 3), 0, "%.*s", (int)n, second);
}

/* Bytes >= 0x80 reach no line raw: invalid UTF-8 (a Redis error of any
 * bytes), valid UTF-8 (a namespace's name) and a C1 control encoded as
 * UTF-8 (U+009B, CSI) alike are \xNN; a line is printable ASCII. */
Test(log, bytes_from_0x80_are_escaped)
{
	const char *out;
	static char big[4000];

	capture_start();
	LOG(LOG_WARN, "redis store: %s", "caf\xc3\xa9 \xff\xfe \xc2\x9b" "31m \x80" "end");
	memset(big, '\xff', sizeof(big) - 1);
	LOG(LOG_WARN, "%s", big);
	out = capture_end();
	cr_assert_not_null(strstr(out, "warn: redis store: caf\\xc3\\xa9 \\xff\\xfe "
				  "\\xc2\\x9b31m \\x80end\n"), "%s", out);
	for (const char *p = out; *p; p++)
		cr_assert((*p >= 0x20 && *p < 0x7f) || *p == '\n', "byte 0x%02x at %zu",
			  (unsigned char)*p, (size_t)(p - out));
	/* A line of them is cut, still one line within the limit. */
	const char *second = strchr(out, '\n') + 1;
	size_t n = strcspn(second, "\n");
	cr_assert_leq(n + 1, 2048);
	cr_assert_eq(strncmp(second + n - 3, "...", 3), 0, "%.*s", (int)n, second);
}

Test(log, long_message_is_cut)
{
	static char big[10000];
	const char *out;
	size_t n;

	memset(big, 'x', sizeof(big) - 1);
	capture_start();
	LOG(LOG_INFO, "%s", big);
	LOG(LOG_INFO, "after");
	out = capture_end();
	n = strcspn(out, "\n");
	cr_assert_leq(n + 1, 2048);
	cr_assert_eq(strncmp(out + n - 4, "x...", 4), 0, "%.*s", (int)n, out);
	cr_assert_not_null(strstr(out + n + 1, "info: after\n"));
}

Test(log, errno_preserved)
{
	capture_start();
	errno = ERANGE;
	LOG(LOG_ERR, "failed: %s", strerror(errno));
	cr_assert_eq(errno, ERANGE);
	capture_end();
}

Test(log, format_time_against_gmtime)
{
	static const int64_t fixed[] = {
		0,                      /* 1970-01-01 */
		68169599999LL,          /* 1972-02-28T23:59:59.999 */
		68169600000LL,          /* 1972-02-29 */
		951782400000LL,         /* 2000-02-29 */
		951868800000LL,         /* 2000-03-01 */
		978220800000LL,         /* 2000-12-31 */
		1709164800123LL,        /* 2024-02-29 */
		1795273818123LL,        /* 2026-11-21T15:10:18.123 */
		4107456000000LL,        /* 2100-02-28 */
		4107542400000LL,        /* 2100-03-01: 2100 is not a leap year */
		13569465600000LL,       /* 2400-01-01 */
		253402300799999LL,      /* 9999-12-31T23:59:59.999 */
	};
	char got[LOG_TIME_LEN], want[96];
	size_t i;
	int64_t ms;

	for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]) + 20000; i++) {
		time_t t;
		struct tm tm;

		if (i < sizeof(fixed) / sizeof(fixed[0]))
			ms = fixed[i];
		else    /* ~1970..2430, every ~8 days, odd milliseconds */
			ms = (int64_t)(i - sizeof(fixed) / sizeof(fixed[0])) * 727372801LL + 7;
		t = (time_t)(ms / 1000);
		cr_assert_not_null(gmtime_r(&t, &tm));
		snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
		log_format_time(got, ms);
		cr_assert_str_eq(got, want, "ms %lld", (long long)ms);
	}
	log_format_time(got, 1795273818123LL);
	cr_assert_str_eq(got, "2026-11-21T15:10:18.123Z");
	log_format_time(got, -1);
	cr_assert_str_eq(got, "1970-01-01T00:00:00.000Z");
	log_format_time(got, INT64_MAX);
	cr_assert_str_eq(got, "9999-12-31T23:59:59.999Z");
}

/* Several processes log long lines to one pipe at once: every line read
 * back must be whole, which holds only if each is one write(2). */
Test(log, processes_do_not_interleave)
{
	enum { CHILDREN = 4, LINES = 300 };
	static char payload[1500];
	static char buf[CHILDREN * LINES * 1700];
	int fds[2], status, i, j, lines = 0;
	pid_t pids[CHILDREN];
	size_t len = 0;
	ssize_t r;
	char *line, *save = NULL;
	regex_t re;

	memset(payload, 'p', sizeof(payload) - 1);
	cr_assert_eq(pipe(fds), 0);
	for (i = 0; i < CHILDREN; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			close(fds[0]);
			dup2(fds[1], STDERR_FILENO);
			close(fds[1]);
			log_worker_id = i;
			for (j = 0; j < LINES; j++)
				LOG(LOG_INFO, "%d %s %d", j, payload, j);
			_exit(0);
		}
	}
	close(fds[1]);
	while ((r = read(fds[0], buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)r;
	close(fds[0]);
	buf[len] = '\0';
	for (i = 0; i < CHILDREN; i++) {
		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}

	cr_assert_eq(regcomp(&re, "^[0-9TZ:.-]{24} \\[pid [0-9]+ w[0-3]\\] info: [0-9]+ p{1499} [0-9]+$",
			     REG_EXTENDED), 0);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		cr_assert_eq(regexec(&re, line, 0, NULL, 0), 0, "mangled line %.80s...", line);
		lines++;
	}
	regfree(&re);
	cr_assert_eq(lines, CHILDREN * LINES);
}

/* Peer-supplied text in a log line: printable ASCII as is, quotes and
 * backslashes escaped, everything else as \xNN, bounded. */
Test(log, escape_peer_text)
{
	char out[LOG_ESCAPED_MAX], big[1000];

	log_escape("plain text", 10, out, sizeof(out));
	cr_assert_str_eq(out, "plain text");
	log_escape("\x1b[31mred\n\"q\"\\", 13, out, sizeof(out));
	cr_assert_str_eq(out, "\\x1b[31mred\\x0a\\\"q\\\"\\\\");
	log_escape("a\0b\xff", 4, out, sizeof(out));
	cr_assert_str_eq(out, "a\\x00b\\xff");
	memset(big, 0x07, sizeof(big));
	log_escape(big, sizeof(big), out, sizeof(out));
	cr_assert_eq(strlen(out), LOG_ESCAPED_SHOWN * 4 + 3);
	cr_assert_str_eq(out + strlen(out) - 3, "...");
	/* a small output is cut on an escape boundary, always terminated */
	log_escape("\x01\x02", 2, out, 6);
	cr_assert_str_eq(out, "\\x01");
}

/* At most one line a second per kind; the next says how many were held. */
Test(log, limit_once_a_second)
{
	struct log_limit l = { 0 };

	cr_assert(log_limit(&l, 100.0));
	cr_assert_str_eq(log_limit_suppressed(&l), "");
	cr_assert(!log_limit(&l, 100.2));
	cr_assert(!log_limit(&l, 100.9));
	cr_assert(log_limit(&l, 101.0));
	cr_assert_str_eq(log_limit_suppressed(&l), " (2 similar suppressed)");
	cr_assert(!log_limit(&l, 101.5));
	/* a clock stepped back does not silence the kind forever */
	cr_assert(log_limit(&l, 50.0));
	cr_assert_str_eq(log_limit_suppressed(&l), " (1 similar suppressed)");
}
