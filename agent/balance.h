/*
 * balance.h - which worker accepts the next connection of a listener.
 *
 * Every worker accepts on the sockets the master bound. Left to the
 * kernel, the worker that wakes first takes whatever is queued: HAProxy
 * 3.x multiplexes many streams over a few long-lived connections, so one
 * worker could end up holding them all and doing all the work. Instead,
 * the next connection of a listener goes to the worker that holds the
 * fewest connections of that listener (ties: the lowest id), among the
 * workers accepting on it and not passed over (the pick). The others
 * leave it to the pick:
 *
 *   listener readable
 *     |
 *     +-- balance_pick() == me --> accept4(), balance_add(+1): the pick may
 *     |                            move to another worker: it is woken
 *     +-- otherwise --> balance_wait(): sleep until woken (the worker's
 *                       eventfd) or until BALANCE_STALL seconds passed with
 *                       no connection of the listener accepted by anyone:
 *                       the pick missed its turn (stopped, starved of CPU);
 *                       balance_missed() passes it over, and the waiter
 *                       takes what is queued
 *
 * A worker passed over on a listener is picked only when every worker
 * accepting on it is, until it shows life: each run of its loop calls
 * balance_alive(), which moves its `beat` if it was passed over, and the
 * mark (the beat it had, + 1) no longer matches. So a stuck worker costs
 * one connection BALANCE_STALL, not every connection while it is stuck,
 * and is picked again as soon as its loop runs. Connections accepted one
 * after the other alternate between two workers that run, whatever the
 * kernel wakes first.
 *
 * The state is a shared anonymous mapping the master creates before fork:
 * one cache line per worker, written only by that worker (the master
 * clears the line of a worker that died), read by all. Wake-ups go through
 * one eventfd per worker, created with the mapping and inherited.
 *
 * No lost wake-up: a worker about to sleep publishes `waiting`, then
 * looks at the counts (and marks) again; a worker whose count changed, or
 * that passed another over, publishes it, then looks at the `waiting` flag
 * of the new pick (all seq_cst). Of two such workers at least one sees
 * what the other wrote. A worker that shows life after a miss publishes
 * its beat, then looks whether it became the pick of a listener it waits
 * on (the caller of balance_alive()): the pick moved to itself, nobody
 * else has to be woken. A mark written with a beat the worker has left
 * already passes nobody over; one written just before the worker moves
 * its beat is undone by its next loop run. Whatever the marks, a sleeper
 * looks again after BALANCE_STALL: a wrong mark costs that, no more.
 *
 * The accept path pays a few atomic loads and one atomic add, and an
 * eventfd write when the pick moves to a sleeping worker; each run of a
 * worker's loop loads three words of its own line (balance_alive); reads,
 * frames and requests pay nothing more.
 */
#ifndef BALANCE_H
#define BALANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/fronts.h"

#define BALANCE_MAX_LISTENERS FRONT_COUNT   /* one per front (agent/fronts.h) */
#define BALANCE_STALL         0.2    /* seconds without an accept: the pick is stuck */

struct balance;

/* The shared state of nworkers workers (master, before fork): counts
 * zero, no worker accepting. NULL with a reason in err. */
struct balance *balance_new(int nworkers, char *err, size_t errlen);

/* Unmaps it and closes the eventfds (the master, at exit). */
void balance_free(struct balance *b);

/* Worker id (re)starts: it holds nothing and accepts on no listener yet.
 * Returns the fd to watch for reading: readable when another process
 * made id the pick of a listener it waits on. */
int balance_attach(struct balance *b, int id);

/* Clears the wake-ups of worker id (reads its eventfd). */
void balance_woken(struct balance *b, int id);

/* Worker id accepts on listener lis from now on (open), or no longer
 * (paused, stopping). Returns the pick, woken if it waits. */
int balance_open(struct balance *b, int id, int lis, bool open);

/* Worker id accepted a connection of lis (delta +1) or one of them
 * closed (-1). Returns the pick, woken if it waits. */
int balance_add(struct balance *b, int id, int lis, int delta);

/* The worker to take the next connection of lis, or -1 when none
 * accepts. */
int balance_pick(const struct balance *b, int lis);

/* Worker id found lis readable but is not the pick: publishes that it
 * waits, then looks again. Returns true if id must wait (*mark is then
 * what balance_stalled() compares), false if id has become the pick
 * (and does not wait). */
bool balance_wait(struct balance *b, int id, int lis, uint64_t *mark);

/* Worker id no longer waits on lis (woken, stalled, stopping). */
void balance_resume(struct balance *b, int id, int lis);

/* Nobody accepted a connection of lis since balance_wait() gave mark. */
bool balance_stalled(const struct balance *b, int lis, uint64_t mark);

/* Worker id found lis stalled: pick (balance_pick() then) missed its
 * turn. It is passed over until it shows life (balance_alive()); id takes
 * what is queued. Returns the new pick, woken if it waits (pick itself if
 * it is id or -1: nothing to mark). */
int balance_missed(struct balance *b, int id, int lis, int pick);

/* Worker id's loop runs (every iteration): if it was passed over, it is
 * not any more. Returns true if it was: the caller then resumes
 * accepting on the listeners it waits on whose pick it has become. */
bool balance_alive(struct balance *b, int id);

/* The master reaped worker id: its connections went with it; it accepts
 * no more. Wakes the new picks. */
void balance_gone(struct balance *b, int id);

/* The connections of lis worker id holds (logs, tests). */
uint32_t balance_held(const struct balance *b, int id, int lis);

#endif /* BALANCE_H */
