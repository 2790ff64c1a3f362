// SPDX-License-Identifier: BSD-3-Clause
/*
 * guard.h - run code that touches client shared memory without letting a SIGBUS kill us.
 *
 * A client may ftruncate a shared-memory object after registering it; touching a mapped
 * page past the new end raises SIGBUS. Every copy between client memory and the daemon's
 * own scratch runs inside guard_call(): a SIGBUS handler, installed once, siglongjmp()s
 * back to guard_call() when the faulting thread has a guard active, and otherwise restores
 * the default action and re-raises (a SIGBUS anywhere else is a real bug and must still
 * crash).
 *
 * The guarded function must be restartable from nothing: no locks taken, no memory
 * allocated, nothing the jump would leak (plain memcpy loops).
 */
#ifndef DASHD_GUARD_H
#define DASHD_GUARD_H

/* Install the SIGBUS handler. Idempotent. Returns 0 or -errno. */
int guard_install(void);

/* Call fn(arg) under a guard. Returns 0, or -EFAULT if it hit a SIGBUS (its effects up to
 * the fault remain). Thread-safe; guard_install() must have run. Not reentrant within
 * one thread. */
int guard_call(void (*fn)(void *arg), void *arg);

#endif
