/*
 * log.h - the one logging macro. Checks the level before evaluating its
 * arguments; prefixes the time, pid and worker id. spop/ and strategies/
 * never log: the callee formats, the caller logs.
 */
#ifndef LOG_H
#define LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
	LOG_ERR = 0,
	LOG_WARN,
	LOG_INFO,
	LOG_DEBUG,
	LOG_LEVEL_COUNT
};

extern int log_level;       /* messages above this level are dropped */
extern int log_worker_id;   /* -1 in the master */

/* Writes one line of printable ASCII: the message's newlines and tabs as
 * spaces, its other control bytes and every byte >= 0x80 as \xNN (log.c
 * says why). Call through LOG(). */
void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses "err", "warn", "info", "debug"; returns the level or -1. */
int log_level_parse(const char *s);

/* Bytes log_format_time() writes, with the NUL: "2026-11-21T15:10:18.123Z". */
#define LOG_TIME_LEN 25

/* Formats Unix time in milliseconds as UTC ISO 8601 into buf (LOG_TIME_LEN
 * bytes). Times before 1970 or after 9999 are clamped. No allocation, no
 * locks, no time zone files (unlike gmtime_r on its first call). */
void log_format_time(char *buf, int64_t unix_ms);

/* Per-event lines (a refused connection, a peer's DISCONNECT...) at most
 * once a second per kind: one struct log_limit per kind, zeroed. */
struct log_limit {
	double last;                /* when a line last passed */
	uint64_t suppressed;        /* lines held back since */
	char note[48];              /* " (N similar suppressed)" or "" */
};

/* May a line of this kind be written at `now` (seconds, any clock)? If
 * not, it is counted; the next line that passes says how many were held
 * back with log_limit_suppressed(). */
bool log_limit(struct log_limit *l, double now);
const char *log_limit_suppressed(const struct log_limit *l);

/* Bytes log_escape() needs at most, with the NUL, for a shown prefix of
 * LOG_ESCAPED_SHOWN input bytes. */
#define LOG_ESCAPED_SHOWN 128
#define LOG_ESCAPED_MAX   (LOG_ESCAPED_SHOWN * 4 + 4)

/* Writes the peer-supplied bytes p[0..n) to out for a log line: printable
 * ASCII as is (backslash and quote escaped), every other byte as \xNN, at
 * most LOG_ESCAPED_SHOWN input bytes then "...". Always NUL-terminates
 * (outlen >= 1). */
void log_escape(const char *p, size_t n, char *out, size_t outlen);

#define LOG(level, ...)                                        \
	do {                                                       \
		if ((level) <= log_level)                              \
			log_write((level), __VA_ARGS__);                   \
	} while (0)

#endif /* LOG_H */
