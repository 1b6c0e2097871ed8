/*
 * test_grpc_abuse.c - hostile peers of the gRPC front (docs/ENVOY.md,
 * "The gRPC front", what one client may hold), written frame by frame
 * (tests/lib/h2raw.py): an endless header block, a flood of resets,
 * streams past the limit, a peer that never reads; and slow ones: an idle
 * connection, a message cut short. Each is held to its bound, and another
 * client is answered meanwhile.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/grpctest.h"

static void start(void)
{
	gt_start("");
}

/* Another client, on its own connection, is answered. */
static void others_answered(void)
{
	cr_assert_str_eq(gt_client("health"), "OK {\"status\":\"SERVING\"}\n", "%s",
			 test_agent_log_tail());
}

/* A header block past 64 KiB (HEADERS and CONTINUATIONs): GOAWAY
 * ENHANCE_YOUR_CALM (11), closed. */
Test(abuse, an_endless_header_block, .init = start, .fini = gt_stop, .timeout = 60)
{
	const char *r = gt_raw("block 80");

	cr_assert(strstr(r, "goaway=11 closed=1"), "%s", r);
	others_answered();
}

/* Streams opened and reset before their request is whole (Rapid Reset):
 * GOAWAY ENHANCE_YOUR_CALM once past the bucket. */
Test(abuse, a_flood_of_resets, .init = start, .fini = gt_stop, .timeout = 60)
{
	const char *r = gt_raw("resets 3000");

	cr_assert(strstr(r, "goaway=11 closed=1"), "%s", r);
	others_answered();
}

/* 3,000 streams opened, none finished: the 1,024 the SETTINGS allow are
 * held, the others refused (RST_STREAM), the connection kept. */
Test(abuse, streams_past_the_limit, .init = start, .fini = gt_stop, .timeout = 60)
{
	const char *r = gt_raw("streams 3000");

	cr_assert_geq(gt_num(r, "refused="), 3000 - 1024, "%s", r);
	cr_assert(strstr(r, "goaway=none"), "%s", r);
	others_answered();
}

/* A peer that sends calls and never reads their answers stops being read
 * (its socket's queue stays put), and others are answered while it is
 * stalled (h2raw.py holds it 5 s after it says so). */
Test(abuse, a_peer_that_never_reads, .init = start, .fini = gt_stop, .timeout = 120)
{
	char cmd[256], out[256] = "";
	FILE *f;

	snprintf(cmd, sizeof(cmd), GT_PY " tests/lib/h2raw.py 127.0.0.1:%d noread 600000 60",
		 gt_grpc_port);
	cr_assert_not_null(f = popen(cmd, "r"));
	cr_assert_not_null(fgets(out, sizeof(out), f));
	cr_assert(strstr(out, "stalled=1"), "%s", out);
	others_answered();
	pclose(f);
	others_answered();
}

/* A connection without a call for idle_timeout_ms: GOAWAY NO_ERROR, closed. */
Test(slow, an_idle_connection, .fini = gt_stop, .timeout = 60)
{
	const char *r;

	gt_start("\"idle_timeout_ms\": 1000,");
	r = gt_raw("idle");
	cr_assert(strstr(r, "goaway=0 closed=1"), "%s", r);
}

/* A request not whole within frame_timeout_ms of its headers is answered
 * (Trailers-Only, the stream ended); the connection goes on. */
Test(slow, a_message_cut_short, .fini = gt_stop, .timeout = 60)
{
	const char *r;

	gt_start("\"frame_timeout_ms\": 500,");
	r = gt_raw("partial");
	cr_assert(strstr(r, "ended=1"), "%s", r);
	others_answered();
}
