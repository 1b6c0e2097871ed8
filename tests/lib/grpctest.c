/*
 * grpctest.c - see grpctest.h.
 */
#include "tests/lib/grpctest.h"
#include "tests/lib/agenttest.h"
#include "tests/lib/port.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int gt_grpc_port, gt_http_port;
static char gt_dir[64];

static const char gt_yaml[] =
	"domain: edge\n"
	"descriptors:\n"
	"  - {key: ip, rate_limit: {unit: hour, requests_per_unit: 3}}\n"
	"  - {key: user, rate_limit: {unit: hour, requests_per_unit: 5}}\n"
	"  - {key: slow, rate_limit: {window: 10, window_type: fixed, delay_max_ms: 60000,\n"
	"                             requests_per_unit: 1}}\n";

static const char *gt_vrun(const char *fmt, va_list ap)
{
	static char out[GT_OUT_MAX];
	char cmd[4096];
	size_t n = 0, k;
	FILE *f;

	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	f = popen(cmd, "r");
	cr_assert_not_null(f, "%s", cmd);
	while (n < sizeof(out) - 1 && (k = fread(out + n, 1, sizeof(out) - 1 - n, f)) > 0)
		n += k;
	out[n] = 0;
	pclose(f);
	return out;
}

const char *gt_run(const char *fmt, ...)
{
	va_list ap;
	const char *out;

	va_start(ap, fmt);
	out = gt_vrun(fmt, ap);
	va_end(ap);
	return out;
}

void gt_start(const char *extra)
{
	char members[1024];

	snprintf(members, sizeof(members),
		 "%s \"namespaces\": [{\"name\": \"edge\", \"count_denied\": false}]", extra);
	gt_start_yaml(gt_yaml, members);
}

void gt_start_yaml(const char *yaml, const char *members)
{
	char json[4096], path[128];
	FILE *f;

	if (system(GT_PY " -c 'import grpc, google.protobuf' 2>/dev/null") != 0)
		cr_skip_test("no " GT_PY " with python3-grpcio (scripts/deps.sh test)");
	snprintf(gt_dir, sizeof(gt_dir), "/tmp/grpctestXXXXXX");
	cr_assert_not_null(mkdtemp(gt_dir));
	snprintf(path, sizeof(path), "%s/edge.yaml", gt_dir);
	cr_assert_not_null(f = fopen(path, "w"));
	fputs(yaml, f);
	fclose(f);
	gt_http_port = test_port(0);
	snprintf(json, sizeof(json),
		 "{\"grpc_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_listen\": \"127.0.0.1:%d\","
		 " \"log_level\": \"debug\", \"envoy_config\": \"%s\", %s}",
		 gt_http_port, path, members);
	test_agent_start1(json);
	gt_grpc_port = test_agent.http_port;
	/* The workers serve once the gRPC front answers. */
	for (int i = 0; i < 100; i++) {
		if (strncmp(gt_client("health"), "OK", 2) == 0)
			return;
		usleep(100000);
	}
	cr_assert_fail("the gRPC front never answered\n%s", test_agent_log_tail());
}

void gt_stop(void)
{
	char path[128];

	test_agent_stop();
	if (!gt_dir[0])
		return;
	snprintf(path, sizeof(path), "%s/edge.yaml", gt_dir);
	unlink(path);
	rmdir(gt_dir);
	gt_dir[0] = 0;
}

void gt_body(const char *path, const char *json)
{
	const char *hex = gt_run(GT_PY " tests/lib/rls_pb.py encode request '%s'", json);
	size_t n = strspn(hex, "0123456789abcdef") / 2;
	FILE *f = fopen(path, "wb");
	unsigned byte;

	cr_assert(n > 0 && f, "encoding %s", json);
	fputc(0, f);
	fputc((int)(n >> 24) & 0xff, f);
	fputc((int)(n >> 16) & 0xff, f);
	fputc((int)(n >> 8) & 0xff, f);
	fputc((int)n & 0xff, f);
	for (size_t i = 0; i < n; i++) {
		sscanf(hex + 2 * i, "%2x", &byte);
		fputc((int)byte, f);
	}
	fclose(f);
}

long gt_num(const char *s, const char *name)
{
	const char *p = strstr(s, name);

	return p ? strtol(p + strlen(name), NULL, 10) : -1;
}
