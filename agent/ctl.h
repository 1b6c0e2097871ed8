/*
 * ctl.h - `spoa-ratelimit ctl ...`: the admin endpoints from the command
 * line (agent/ctl.c, docs/OPERATIONS.md).
 */
#ifndef CTL_H
#define CTL_H

/* argv[0] is "ctl". Returns the exit status: 0, 1 (the agent said no, or
 * could not be reached), 2 (usage or configuration). */
int ctl_main(int argc, char **argv);

#endif /* CTL_H */
