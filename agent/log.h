/*
 * log.h - the one logging macro. Checks the level before evaluating its
 * arguments; prefixes the time, pid and worker id. spop/ and strategies/
 * never log: the callee formats, the caller logs.
 */
#ifndef LOG_H
#define LOG_H

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

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses "err", "warn", "info", "debug"; returns the level or -1. */
int log_level_parse(const char *s);

/* Bytes log_format_time() writes, with the NUL: "2026-11-21T15:10:18.123Z". */
#define LOG_TIME_LEN 25

/* Formats Unix time in milliseconds as UTC ISO 8601 into buf (LOG_TIME_LEN
 * bytes). Times before 1970 or after 9999 are clamped. No allocation, no
 * locks, no time zone files (unlike gmtime_r on its first call). */
void log_format_time(char *buf, int64_t unix_ms);

#define LOG(level, ...)                                        \
	do {                                                       \
		if ((level) <= log_level)                              \
			log_write((level), __VA_ARGS__);                   \
	} while (0)

#endif /* LOG_H */
