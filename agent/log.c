/*
 * log.c - the agent's log lines, on stderr:
 *
 *   2026-11-21T15:10:18.123Z [pid 1234 w0] warn: message
 *   2026-11-21T15:10:18.123Z [pid 1233 m] info: message      (the master)
 *
 * Every line is built in a stack buffer smaller than PIPE_BUF and written
 * with one write(2), so lines from the master and the workers sharing one
 * stderr pipe never interleave. Nothing here allocates or takes a lock:
 * the time is formatted by hand because gmtime_r may load time zone data
 * (and allocate) on its first call.
 */
#include "agent/log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* One line, with its '\n'. Below PIPE_BUF (4096 on Linux, >= 512 by POSIX
 * but Linux is our target) so a write to a pipe is atomic. */
#define LOG_LINE_MAX 2048
_Static_assert(LOG_LINE_MAX <= PIPE_BUF, "a log line must fit one atomic pipe write");

/* 9999-12-31T23:59:59.999Z: the last instant with a 4-digit year. */
#define LOG_TIME_MAX_MS 253402300799999LL

#define LOG_DAYS_PER_400Y 146097    /* 400 * 365 + 97 leap days */

int log_level = LOG_INFO;
int log_worker_id = -1;

static const char *const log_names[LOG_LEVEL_COUNT] = {
	[LOG_ERR]   = "err",
	[LOG_WARN]  = "warn",
	[LOG_INFO]  = "info",
	[LOG_DEBUG] = "debug",
};

int log_level_parse(const char *s)
{
	int i;

	if (!s)
		return -1;
	for (i = 0; i < LOG_LEVEL_COUNT; i++)
		if (strcmp(s, log_names[i]) == 0)
			return i;
	return -1;
}

static bool log_is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Writes v as exactly `width` decimal digits (v >= 0, fits the width). */
static void log_put_digits(char *p, int64_t v, int width)
{
	while (width-- > 0) {
		p[width] = (char)('0' + v % 10);
		v /= 10;
	}
}

void log_format_time(char *buf, int64_t unix_ms)
{
	static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int64_t secs, days, year = 1970;
	int ms, sod, month = 0;

	if (unix_ms < 0)
		unix_ms = 0;
	if (unix_ms > LOG_TIME_MAX_MS)
		unix_ms = LOG_TIME_MAX_MS;
	secs = unix_ms / 1000;
	ms = (int)(unix_ms % 1000);
	days = secs / 86400;
	sod = (int)(secs % 86400);

	/* The leap rule repeats every 400 years, so any 400 consecutive years
	 * hold the same number of days: skip them whole, then walk years and
	 * months (at most 399 + 11 steps). */
	year += days / LOG_DAYS_PER_400Y * 400;
	days %= LOG_DAYS_PER_400Y;
	for (;;) {
		int len = log_is_leap(year) ? 366 : 365;

		if (days < len)
			break;
		days -= len;
		year++;
	}
	for (;;) {
		int len = mdays[month] + (month == 1 && log_is_leap(year));

		if (days < len)
			break;
		days -= len;
		month++;
	}

	/* 2026-11-21T15:10:18.123Z */
	log_put_digits(buf, year, 4);
	buf[4] = '-';
	log_put_digits(buf + 5, month + 1, 2);
	buf[7] = '-';
	log_put_digits(buf + 8, days + 1, 2);
	buf[10] = 'T';
	log_put_digits(buf + 11, sod / 3600, 2);
	buf[13] = ':';
	log_put_digits(buf + 14, sod / 60 % 60, 2);
	buf[16] = ':';
	log_put_digits(buf + 17, sod % 60, 2);
	buf[19] = '.';
	log_put_digits(buf + 20, ms, 3);
	buf[23] = 'Z';
	buf[24] = '\0';
}

/* Contract: one call, one line, one write(2); errno is preserved so a
 * caller may log and then still look at errno. Messages above log_level are
 * dropped here too (LOG() already checks before evaluating arguments). A
 * message too long for the line ends in "..."; newlines and tabs inside it
 * become spaces and a trailing newline is dropped, so a line is always one
 * line; other control characters and every byte >= 0x80 are written as
 * \xNN, so a line is printable ASCII whatever the message held. */
void log_write(int level, const char *fmt, ...)
{
	static const char hex[] = "0123456789abcdef";
	char line[LOG_LINE_MAX], out[LOG_LINE_MAX];
	const size_t cap = sizeof(line) - 1;    /* keep one byte for '\n' */
	struct timespec ts;
	size_t n, msg, i, o, off;
	int saved_errno = errno;
	int k;
	va_list ap;

	if (level > log_level)
		return;
	if (level < LOG_ERR)
		level = LOG_ERR;
	if (level >= LOG_LEVEL_COUNT)
		level = LOG_DEBUG;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
		ts.tv_sec = 0, ts.tv_nsec = 0;
	log_format_time(line, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	n = LOG_TIME_LEN - 1;

	if (log_worker_id < 0)
		k = snprintf(line + n, cap - n, " [pid %ld m] %s: ", (long)getpid(), log_names[level]);
	else
		k = snprintf(line + n, cap - n, " [pid %ld w%d] %s: ", (long)getpid(), log_worker_id,
			     log_names[level]);
	if (k > 0)
		n += (size_t)k < cap - n ? (size_t)k : cap - n - 1;
	msg = n;

	va_start(ap, fmt);
	k = vsnprintf(line + n, cap - n, fmt, ap);
	va_end(ap);
	if (k > 0 && (size_t)k >= cap - n) {
		n = cap - 1;                    /* what vsnprintf kept */
		memcpy(line + n - 3, "...", 3);
	} else if (k > 0) {
		n += (size_t)k;
	}

	while (n > msg && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	/* Text from peers and stores (a Redis error, a PostgreSQL message)
	 * may hold terminal controls: ESC, BEL, ... become \xNN here, whatever
	 * the caller formatted, so no log line can drive a terminal. Bytes
	 * >= 0x80 too: invalid UTF-8 would break a reader expecting text, and
	 * valid UTF-8 can still carry C1 controls (U+009B is CSI) and
	 * direction overrides; the line is ASCII, as nginx's and HAProxy's. */
	memcpy(out, line, msg);
	for (i = msg, o = msg; i < n && o + 5 < sizeof(out); i++) {
		unsigned char ch = (unsigned char)line[i];

		if (ch == '\n' || ch == '\r' || ch == '\t') {
			out[o++] = ' ';
		} else if (ch < 0x20 || ch >= 0x7f) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		} else {
			out[o++] = (char)ch;
		}
	}
	if (i < n)
		memcpy(out + o - 3, "...", 3);
	out[o++] = '\n';

	for (off = 0; off < o;) {
		ssize_t w = write(STDERR_FILENO, out + off, o - off);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		off += (size_t)w;
	}
	errno = saved_errno;
}

bool log_limit(struct log_limit *l, double now)
{
	if (l->last != 0 && now - l->last < 1.0 && now >= l->last) {
		l->suppressed++;
		return false;
	}
	if (l->suppressed)
		snprintf(l->note, sizeof(l->note), " (%llu similar suppressed)",
			 (unsigned long long)l->suppressed);
	else
		l->note[0] = '\0';
	l->suppressed = 0;
	l->last = now;
	return true;
}

const char *log_limit_suppressed(const struct log_limit *l)
{
	return l->note;
}

void log_escape(const char *p, size_t n, char *out, size_t outlen)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, shown = n < LOG_ESCAPED_SHOWN ? n : LOG_ESCAPED_SHOWN;

	for (size_t i = 0; i < shown; i++) {
		unsigned char ch = (unsigned char)p[i];
		char e[4];
		size_t k = 0;

		if (ch == '\\' || ch == '"') {
			e[k++] = '\\';
			e[k++] = (char)ch;
		} else if (ch >= 0x20 && ch < 0x7f) {
			e[k++] = (char)ch;
		} else {
			e[k++] = '\\';
			e[k++] = 'x';
			e[k++] = hex[ch >> 4];
			e[k++] = hex[ch & 15];
		}
		if (o + k + 1 > outlen)
			break;
		memcpy(out + o, e, k);
		o += k;
	}
	if (shown < n && o + 4 <= outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}
