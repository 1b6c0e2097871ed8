/*
 * agenttest.c - see agenttest.h.
 */
#include "tests/lib/agenttest.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <sys/wait.h>

struct agentproc test_agent;

const char *test_agent_log_tail(void)
{
	static char tail[3000];

	agentproc_log_tail(&test_agent, tail, sizeof(tail));
	return tail;
}

void test_agent_start(const char *json, const char *const *args)
{
	if (!agentproc_available())
		cr_skip_test("agent binary %s not built ($AGENT)", agentproc_binary());
	cr_assert(agentproc_start(&test_agent, json, args, AGENTTEST_START_MS) == 0,
		  "starting the agent: %s\n--- agent log ---\n%s", test_agent.err,
		  test_agent_log_tail());
}

void test_agent_start1(const char *json)
{
	static const char *const args[] = { "-w", "1", NULL };

	test_agent_start(json, args);
}

void test_agent_start_plain(void)
{
	test_agent_start1(NULL);
}

void test_agent_stop(void)
{
	if (!test_agent.log_path[0])
		return;
	cr_expect(!agentproc_finish(&test_agent, 10000),
		  "the agent's log holds a sanitizer report:\n%s", test_agent_log_tail());
}

int test_agent_ctl(const char *args, char *out, size_t cap)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "%s ctl -c %s %s 2>&1", agentproc_binary(),
		 test_agent.cfg_path, args);
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f, "%s", cmd);
	size_t n = fread(out, 1, cap - 1, f);
	out[n] = '\0';
	int st = pclose(f);
	cr_log_info("ctl %s:\n%s", args, out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
