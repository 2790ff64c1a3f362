// SPDX-License-Identifier: BSD-3-Clause
/*
 * guard.c - see guard.h.
 *
 * The jump buffer and the "guard active" flag are thread-local: the worker thread copies
 * while the loop thread does other things, and a fault belongs to the thread that took it
 * (SIGBUS from a memory access is delivered to the faulting thread).
 */
#include "guard.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static _Thread_local sigjmp_buf guard_env;
static _Thread_local volatile sig_atomic_t guard_active;
static atomic_int guard_installed;

static void on_sigbus(int sig, siginfo_t *info, void *uctx)
{
    (void)info;
    (void)uctx;
    if (guard_active) {
        guard_active = 0;
        siglongjmp(guard_env, 1);
    }
    /* Not a guarded access: crash as if we had no handler. For a fault, returning retries
     * the access under the default action; for a signal sent by kill, the raise does it
     * once the handler returns and unblocks SIGBUS. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

int guard_install(void)
{
    if (atomic_exchange(&guard_installed, 1))
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) < 0) {
        int rc = -errno;
        atomic_store(&guard_installed, 0);
        return rc;
    }
    return 0;
}

int guard_call(void (*fn)(void *arg), void *arg)
{
    /* savemask = 1: the jump leaves the handler, and SIGBUS must be unblocked again. */
    if (sigsetjmp(guard_env, 1))
        return -EFAULT;
    guard_active = 1;
    fn(arg);
    guard_active = 0;
    return 0;
}
