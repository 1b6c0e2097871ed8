/*
 * grpctest.h - the gRPC front's tests' side (tests/test_grpc.c,
 * tests/test_grpc_abuse.c): the test's agent with grpc_listen and an
 * envoy_config of its own, and its real clients run as commands: Debian's
 * python3-grpcio (tests/lib/grpc_client.py), frames written by hand
 * (tests/lib/h2raw.py), nghttp2-client's nghttp and h2load.
 */
#ifndef GRPCTEST_H
#define GRPCTEST_H

#include <stddef.h>

#define GT_PY "/usr/bin/python3"
#define GT_OUT_MAX 8192

/* The agent's gRPC port (test_agent.http_port) and its HTTP front's. */
extern int gt_grpc_port, gt_http_port;

/* Starts the test's agent, one worker, log_level debug, grpc_listen and
 * http_listen, the namespace "edge" (count_denied false) of the YAML
 *
 *   domain: edge
 *   ip: hour, 3   user: hour, 5   slow: fixed 10 s window, 1, delay_max_ms 60000
 *
 * and extra (JSON members, may be "", followed by a comma when not).
 * Skips the test without python3-grpcio. */
void gt_start(const char *extra);

/* The same with yaml (one domain) as its envoy_config and members (JSON
 * members, not empty: its "namespaces" and any other key) for the rest. */
void gt_start_yaml(const char *yaml, const char *members);

/* Stops it (expecting no sanitizer report) and removes its YAML: a .fini. */
void gt_stop(void);

/* Runs a shell command (printf format); its stdout (at most GT_OUT_MAX - 1
 * bytes, NUL-terminated) into a static buffer returned. */
const char *gt_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* tests/lib/grpc_client.py, tests/lib/h2raw.py against the agent: fmt
 * (a literal) their arguments after its address. */
#define gt_client(fmt, ...) \
	gt_run(GT_PY " tests/lib/grpc_client.py 127.0.0.1:%d " fmt, gt_grpc_port, ##__VA_ARGS__)
#define gt_raw(fmt, ...) \
	gt_run(GT_PY " tests/lib/h2raw.py 127.0.0.1:%d " fmt, gt_grpc_port, ##__VA_ARGS__)

/* A ShouldRateLimit request (JSON, as rls_pb.py reads it) written as a
 * gRPC message (prefix included) to path, for nghttp and h2load. */
void gt_body(const char *path, const char *json);

/* The number after `name` (e.g. "\"limit_remaining\":") in s, or -1. */
long gt_num(const char *s, const char *name);

#endif /* GRPCTEST_H */
