// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_signal.c - stream-ordered ops (dash_forward_stream, dash_backward_stream): the
 * daemon's work ordered against the caller's CUDA stream, by the client's semaphores
 * (signal_op) or, where those cannot be used, by the event ring that dash_cuda.c makes
 * (stream_op picks).
 *
 * Stream-ordered ops (dash_forward_stream). The daemon's work is ordered against the
 * caller's stream on the GPU, not on the host: the library records an interprocess event
 * on the caller's stream and names it as the op's wait event; the daemon records another
 * after the op and replies as soon as the op is queued; the library then makes the
 * caller's stream wait for that event. The host waits one round trip, never for the GPU.
 * The events come from a ring made once per client (DASH__EVENT_RING, registered like a
 * buffer, again after a daemon restart). Reusing a slot is safe because each call is done
 * with both its events before it returns: a stream wait binds to the record that
 * precedes it, so a later record of the same event cannot disturb it.
 *
 * Semaphores (struct dash__signals, dash_internal.h) take even that round trip away: the
 * caller's stream writes ready[slot] = seq behind its own work, the request goes out, and
 * the stream waits for done[slot] >= seq, which the daemon's stream writes after the op.
 * An op the daemon does not finish is released by the library instead (release_slot: its
 * outputs poisoned, then the done word written), by the call that reads its reply or by
 * the watchdog thread, which also releases every op in flight when the daemon is gone; the
 * next call, or dash_sync(), reports the failure.
 *
 * Built without CUDA, the stream-ordered calls say DASH_ENOGPU and the hooks the rest of
 * the library calls do nothing.
 */
#include "client/dash_internal.h"

#include <stdlib.h> /* both variants free() */

#ifdef DASH_HAVE_CUDA

#include <cuda.h> /* types only (CUresult, CUdeviceptr) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WATCHDOG_TICK_MS 100

typedef CUresult (*stream_value_fn)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                    unsigned int flags);

/* 64-bit stream memory operations (NULL when the driver lacks them; a device must also
 * say it can use them) */
static stream_value_fn wait_value, write_value;

void dash__find_stream_mem_ops(void)
{
    void *w = NULL, *v = NULL;
    enum cudaDriverEntryPointQueryResult fw = cudaDriverEntryPointSymbolNotFound, fv = fw;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault,
                                         &fw) == cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &v, 12000, cudaEnableDefault,
                                         &fv) == cudaSuccess &&
        fw == cudaDriverEntryPointSuccess && fv == cudaDriverEntryPointSuccess) {
        wait_value = (stream_value_fn)w;
        write_value = (stream_value_fn)v;
    } else {
        (void)cudaGetLastError();
    }
}

/* ---- semaphores (signals) -------------------------------------------------------------- */

static uint64_t *ready_word(const struct dash__signals *g, int32_t slot)
{
    return (uint64_t *)g->mem + slot;
}

static uint64_t *done_word(const struct dash__signals *g, int32_t slot)
{
    return (uint64_t *)g->mem + DASH__SIGNAL_SLOTS + slot;
}

/* Calls from the caller's thread (reading a reply, a restore) that another thread's CUDA
 * graph capture in global mode (PyTorch's default) must not see: relaxed for their span,
 * so that none of them can invalidate that capture. relaxed_leave(relaxed_enter()). */
struct capture_mode {
    enum cudaStreamCaptureMode mode;
    int swapped;
};

static struct capture_mode relaxed_enter(void)
{
    struct capture_mode m = {.mode = cudaStreamCaptureModeRelaxed};
    m.swapped = cudaThreadExchangeStreamCaptureMode(&m.mode) == cudaSuccess;
    return m;
}

static void relaxed_leave(struct capture_mode m)
{
    if (m.swapped)
        (void)cudaThreadExchangeStreamCaptureMode(&m.mode);
}

/* Return (and forget) the failure of an earlier stream-ordered op not yet told, its message
 * in dash_last_error(); 0 when there is none. */
static int take_async_failure(struct dash_client *c)
{
    const int rc = c->async_code;
    if (rc) {
        c->async_code = 0;
        snprintf(c->last_error, sizeof c->last_error, "%s", c->async_msg);
    }
    return rc;
}

/* The slot's release stream, made at its first use (under mu, its device current). */
static CUstream slot_stream_locked(struct dash__signals *g, int32_t slot)
{
    if (!g->slot_release_stream[slot]) {
        const struct capture_mode m = relaxed_enter();
        cudaStream_t made = NULL;
        if (cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking) != cudaSuccess)
            made = NULL;
        (void)cudaGetLastError();
        relaxed_leave(m);
        /* The shared stream where no stream of its own could be made (out of
         * resources): a release may then wait behind another's, as before. For good:
         * a later release of this slot on a stream of its own could overtake this one,
         * write done[slot] = seq + n before this one writes seq (the word going back),
         * and let the caller's stream past this op before its poison. */
        g->slot_release_stream[slot] = made ? (void *)made : g->release_stream;
    }
    return (CUstream)g->slot_release_stream[slot];
}

/* The caller's stream will write ready[slot] = seq and no daemon waits for it: queue a wait
 * for the write on the slot's stream, and keep the slot from being used again until that
 * stream is idle (struct dash__signals.unwritten). Under mu. Returns the stream. */
static CUstream hold_until_written_locked(struct dash__signals *g, int32_t slot, uint64_t seq)
{
    CUstream st = slot_stream_locked(g, slot);
    if (wait_value(st, (CUdeviceptr)(uintptr_t)ready_word(g, slot), seq, CU_STREAM_WAIT_VALUE_GEQ) !=
        CUDA_SUCCESS) {
        (void)cudaGetLastError();
        g->unwritten[slot] = UINT64_MAX; /* no way to see the write land: never used again */
    } else if (g->unwritten[slot] < seq) {
        g->unwritten[slot] = seq;
    }
    return st;
}

/* Release op seq of slot from here (any thread, its device current, under mu: release_slot
 * takes it; no host wait): on the slot's release stream (slot_stream_locked), wait until
 * the caller's stream has written ready[slot] (so the poison lands after whatever the
 * caller wrote into the outputs before the op), poison the outputs, then write done[slot] =
 * seq, which lets the caller's stream go on - past the poison, as a write with the default
 * flags follows a memory barrier. Once per op: a second release (the watchdog and the call
 * reading the reply both try) does nothing, and never poisons after the done word. */
static void release_slot_locked(struct dash__signals *g, int32_t slot, uint64_t seq)
{
    if (g->released_seq[slot] < seq) {
        g->released_seq[slot] = seq;
        CUstream st = hold_until_written_locked(g, slot, seq);
        if (g->poison[slot].seq == seq)
            (void)dash__poison_outputs(&g->poison[slot], st);
        (void)write_value(st, (CUdeviceptr)(uintptr_t)done_word(g, slot), seq,
                          CU_STREAM_WRITE_VALUE_DEFAULT);
        (void)cudaGetLastError();
    }
}

static void release_slot(struct dash__signals *g, int32_t slot, uint64_t seq)
{
    pthread_mutex_lock(&g->mu);
    release_slot_locked(g, slot, seq);
    pthread_mutex_unlock(&g->mu);
}

/* Op seq of slot will never be released (its call failed before the caller's stream
 * waited for it): a later release would poison outputs the caller has since reused.
 * written: the caller's stream has the op's ready write queued (the slot waits for it). */
static void forget_slot(struct dash__signals *g, int32_t slot, uint64_t seq, int written)
{
    pthread_mutex_lock(&g->mu);
    if (g->released_seq[slot] < seq)
        g->released_seq[slot] = seq;
    if (written)
        (void)hold_until_written_locked(g, slot, seq);
    (void)cudaGetLastError();
    pthread_mutex_unlock(&g->mu);
}

void dash__signal_release(struct dash_client *c, int32_t slot, uint64_t seq)
{
    struct dash__signals *g = c->signals;
    if (!g || c->pid != getpid())
        return;
    int old;
    if (dash__switch_device(g->device, &old) == 0)
        release_slot(g, slot, seq);
    (void)cudaGetLastError();
    dash__restore_device(old, g->device);
}

int dash__signal_released(struct dash_client *c, int32_t slot, uint64_t seq)
{
    struct dash__signals *g = c->signals;
    if (!g || c->pid != getpid())
        return 0;
    pthread_mutex_lock(&g->mu);
    const int released = g->released_seq[slot] >= seq;
    pthread_mutex_unlock(&g->mu);
    return released;
}

/* n signal words from device memory at from into the host at to, on the library's poll
 * stream, waited for. 0, or -1 (the CUDA error cleared). */
static int read_words(struct dash__signals *g, const uint64_t *from, size_t n, uint64_t *to)
{
    cudaStream_t st = (cudaStream_t)g->poll_stream;
    if (cudaMemcpyAsync(to, from, n * sizeof *to, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

int dash__signal_completed(struct dash_client *c, int32_t slot, uint64_t seq)
{
    struct dash__signals *g = c->signals;
    if (!g || c->pid != getpid() || dash__signal_released(c, slot, seq))
        return 0;
    int old;
    if (dash__switch_device(g->device, &old) != 0) {
        (void)cudaGetLastError();
        return 0;
    }
    const struct capture_mode m = relaxed_enter();
    uint64_t word = 0;
    const int read = read_words(g, done_word(g, slot), 1, &word) == 0;
    (void)cudaGetLastError();
    relaxed_leave(m);
    dash__restore_device(old, g->device);
    return read && word >= seq;
}

/* The largest sequence number <= issued that uses slot, or 0. */
static uint64_t last_seq_of_slot(uint64_t issued, int32_t slot)
{
    if (issued < (uint64_t)slot)
        return 0;
    return issued - (issued - (uint64_t)slot) % DASH__SIGNAL_SLOTS;
}

/* Whether to give up on the ops in flight: the daemon's process is gone, or none of them
 * has moved for ten timeouts (a daemon that stopped serving us, whatever its state).
 * *ret_pid: the daemon it decided about (daemon_pid as it read it). */
static int daemon_gone(struct dash__signals *g, int64_t quiet_ms, int64_t *ret_pid)
{
    const int64_t pid = atomic_load(&g->daemon_pid);
    *ret_pid = pid;
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 1;
    return quiet_ms > 10 * g->patience_ms;
}

static int64_t peer_pid(const struct dash_client *c)
{
    int64_t uid, pid;
    return wire_peer_creds(c->peer_ok, &uid, &pid) == 0 ? pid : -1;
}

void dash__signals_new_daemon(struct dash_client *c, int answered)
{
    if (c->signals)
        atomic_store(&c->signals->daemon_pid, answered ? peer_pid(c) : -1);
}

/* See struct dash__signals. */
static void *watchdog_main(void *arg)
{
    struct dash__signals *g = arg;
    /* A CUDA graph the caller captures in global mode (PyTorch's default) prohibits the
     * "unsafe" calls of every other thread, and one such call invalidates that capture:
     * this thread's copies and synchronisations on its own stream belong to no capture,
     * so it runs in relaxed mode and never breaks a capture elsewhere in the process. */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    /* seen and now: the done words then the fail words, as they lie in g->mem. now is
     * pinned: a copy into pageable memory is staged by the driver and took about 1 ms a
     * poll on an H100 (a training step's trace, bench/results/device-session-2026-12-06b.md),
     * where the pinned copy is one small DMA on this thread's stream. */
    enum { WORDS = 2 * DASH__SIGNAL_SLOTS };
    uint64_t *seen = calloc(WORDS, sizeof *seen), *pinned = NULL;
    if (!seen || cudaSetDevice(g->device) != cudaSuccess) {
        free(seen);
        return NULL;
    }
    if (cudaMallocHost((void **)&pinned, WORDS * sizeof *pinned) != cudaSuccess) {
        (void)cudaGetLastError();
        pinned = NULL; /* pageable, then: slower polls, the same words */
    }
    uint64_t *now = pinned ? pinned : calloc(WORDS, sizeof *now);
    if (!now) {
        free(seen);
        return NULL;
    }
    uint64_t *now_done = now, *now_fail = now_done + DASH__SIGNAL_SLOTS;
    int64_t progress_ms = dash__now_ms();
    const struct timespec tick = {0, WATCHDOG_TICK_MS * 1000000L};
    while (!atomic_load(&g->stop)) {
        nanosleep(&tick, NULL);
        if (atomic_load(&g->outstanding) == 0 || atomic_load(&g->released)) {
            progress_ms = dash__now_ms();
            continue;
        }
        if (read_words(g, done_word(g, 0), WORDS, now_done) != 0)
            continue;
        /* ops the daemon failed: poison and release them now, not when the caller next
         * calls us (it may be blocked in a synchronise) */
        for (int32_t i = 0; i < DASH__SIGNAL_SLOTS; i++)
            if (now_fail[i] > now_done[i])
                release_slot(g, i, now_fail[i]);
        if (memcmp(now_done, seen, WORDS * sizeof *seen) != 0) {
            memcpy(seen, now_done, WORDS * sizeof *seen);
            progress_ms = dash__now_ms();
            continue;
        }
        int64_t gone_pid;
        if (!daemon_gone(g, dash__now_ms() - progress_ms, &gone_pid))
            continue;
        /* the done words again: a daemon that wrote some before it went is not raced */
        if (read_words(g, done_word(g, 0), WORDS, now_done) != 0)
            continue;
        /* Under mu, against the caller's thread restoring the session meanwhile: it stores
         * the new daemon's pid (or -1 when it sends a Hello) before it asks, under mu,
         * whether an op was released (dash__signal_released) and sends it again. So either
         * these releases come first and the restore drops the ops, or the pid has changed
         * and the decision above was about a daemon the ops no longer wait for: nothing is
         * released here then (an op sent again to the new daemon, released here too, would
         * let the caller's stream go on while that daemon still writes its outputs). */
        pthread_mutex_lock(&g->mu);
        if (atomic_load(&g->daemon_pid) != gone_pid) {
            pthread_mutex_unlock(&g->mu);
            progress_ms = dash__now_ms();
            continue;
        }
        const uint64_t issued = atomic_load(&g->issued);
        for (int32_t i = 0; i < DASH__SIGNAL_SLOTS; i++) {
            uint64_t target = last_seq_of_slot(issued, i);
            if (target > now_done[i])
                release_slot_locked(g, i, target);
        }
        (void)cudaGetLastError();
        atomic_store(&g->released, 1);
        pthread_mutex_unlock(&g->mu);
    }
    free(seen);
    if (pinned)
        (void)cudaFreeHost(pinned);
    else
        free(now);
    return NULL;
}

/* The watchdog released the ops in flight: fail them here (the next call reports it). */
static void take_release(struct dash_client *c)
{
    struct dash__signals *g = c->signals;
    if (!g || !atomic_load(&g->released))
        return;
    Dash__Reply why = DASH__REPLY__INIT;
    char msg[160];
    snprintf(msg, sizeof msg, "dashd (pid %lld) went away with this op in flight: its outputs "
             "were not computed", (long long)atomic_load(&g->daemon_pid));
    why.message = msg;
    /* clear the flag first: a release after this point sets it again for the next call */
    atomic_store(&g->released, 0);
    /* only the ops the watchdog did release: one issued after its look at `issued` may be
     * in flight at a daemon that will run it (failing it here would release it too) */
    for (int32_t i = 0; i < DASH__SIGNAL_SLOTS; i++)
        if (g->slot_req[i] && dash__signal_released(c, i, g->slot_req[i]->signal_seq))
            dash__op_finish(c, g->slot_req[i], DASH_EIO, &why);
}

static int signals_idle(struct dash_client *c, const void *arg)
{
    (void)arg;
    return !c->signals || atomic_load(&c->signals->outstanding) == 0;
}

int dash__signals_settle(struct dash_client *c)
{
    struct dash__signals *g = c->signals;
    if (!g)
        return 0;
    take_release(c);
    int rc = dash__wait(c, signals_idle, NULL, -1, dash__now_ms());
    if (rc) {
        Dash__Reply why = DASH__REPLY__INIT;
        why.message = (char *)"dashd did not answer: the op's outputs were not computed";
        for (int32_t i = 0; i < DASH__SIGNAL_SLOTS; i++)
            if (g->slot_req[i])
                dash__op_finish(c, g->slot_req[i], rc, &why);
    }
    dash__reap_detached(c);
    return rc;
}

int dash_sync(struct dash_client *c)
{
    if (!c)
        return DASH_EINVAL;
    int rc = dash__signals_settle(c);
    const int told = take_async_failure(c);
    return told ? told : rc;
}

void dash__signals_destroy(struct dash_client *c, int in_child)
{
    struct dash__signals *g = c->signals;
    c->signals = NULL;
    if (!g)
        return;
    if (g->watchdog_started && !in_child) {
        atomic_store(&g->stop, 1);
        pthread_join(g->watchdog, NULL);
    }
    if (!in_child) {
        int old;
        if (dash__switch_device(g->device, &old) == 0) {
            /* their waits and poison read and write memory freed here */
            for (int32_t i = 0; i < DASH__SIGNAL_SLOTS; i++)
                if (g->slot_release_stream[i] && g->slot_release_stream[i] != g->release_stream) {
                    (void)cudaStreamSynchronize((cudaStream_t)g->slot_release_stream[i]);
                    (void)cudaStreamDestroy((cudaStream_t)g->slot_release_stream[i]);
                }
            (void)cudaStreamSynchronize((cudaStream_t)g->release_stream);
            (void)cudaStreamDestroy((cudaStream_t)g->release_stream);
            (void)cudaStreamDestroy((cudaStream_t)g->poll_stream);
            (void)cudaFree(g->mem);
        }
        (void)cudaGetLastError();
        dash__restore_device(old, g->device);
    }
    if (g->buf)
        g->buf->users = 0; /* client_free destroys the buffer itself */
    pthread_mutex_destroy(&g->mu);
    free(g->poison);
    free(g->released_seq);
    free(g);
}

/* Make the semaphores on `device` (current) and register them, waiting for the daemon.
 * DASH_ENOTSUP when this process's driver or GPU cannot use them. */
static int signals_make(struct dash_client *c, int device)
{
    int ok = 0;
    if (!wait_value || !write_value ||
        cudaDeviceGetAttribute(&ok, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                               device) != cudaSuccess || !ok) {
        (void)cudaGetLastError();
        return DASH_ENOTSUP;
    }
    struct dash__signals *g = calloc(1, sizeof *g);
    if (!g)
        return DASH_ENOMEM;
    g->device = device;
    const size_t bytes = 3 * DASH__SIGNAL_SLOTS * sizeof(uint64_t);
    cudaStream_t rs = NULL, ps = NULL;
    g->poison = calloc(DASH__SIGNAL_SLOTS, sizeof *g->poison);
    g->released_seq = calloc(DASH__SIGNAL_SLOTS, sizeof *g->released_seq);
    if (!g->poison || !g->released_seq || pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g->poison);
        free(g->released_seq);
        free(g);
        return DASH_ENOMEM;
    }
    /* The words start at zero before anything can write them: cudaMemset would queue the
     * zeroing on the legacy stream, which the caller's non-blocking stream does not wait
     * for, so it could land after the first op's ready word and wipe it (dashd's stream
     * then waits for that word forever, and every client's ops behind it). Zeroed on the
     * library's own stream and waited for here, once per client. */
    if (cudaMalloc(&g->mem, bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMemsetAsync(g->mem, 0, bytes, rs) != cudaSuccess || cudaStreamSynchronize(rs) != cudaSuccess) {
        (void)cudaGetLastError();
        if (rs)
            (void)cudaStreamDestroy(rs);
        if (ps)
            (void)cudaStreamDestroy(ps);
        if (g->mem)
            (void)cudaFree(g->mem);
        pthread_mutex_destroy(&g->mu);
        free(g->poison);
        free(g->released_seq);
        free(g);
        return DASH_ENOMEM;
    }
    g->release_stream = rs;
    g->poll_stream = ps;
    int rc = dash_cuda_register(c, g->mem, bytes, &g->buf);
    if (rc) {
        (void)cudaStreamDestroy(rs);
        (void)cudaStreamDestroy(ps);
        (void)cudaFree(g->mem);
        pthread_mutex_destroy(&g->mu);
        free(g->poison);
        free(g->released_seq);
        free(g);
        return rc;
    }
    g->buf->users = 1; /* not the caller's to free, nor the view cache's */
    atomic_store(&g->daemon_pid, peer_pid(c));
    g->patience_ms = c->timeout_ms;
    g->watchdog_started = pthread_create(&g->watchdog, NULL, watchdog_main, g) == 0;
    c->signals = g;
    return 0;
}

/* Whether slot still waits for a ready write no daemon consumes (dash__signals.unwritten);
 * clears the mark once the slot's stream is idle. Its device current. */
static int slot_unwritten(struct dash__signals *g, int32_t slot)
{
    pthread_mutex_lock(&g->mu);
    int waits = g->unwritten[slot] != 0;
    if (waits && g->unwritten[slot] != UINT64_MAX) {
        const struct capture_mode m = relaxed_enter();
        if (cudaStreamQuery((cudaStream_t)g->slot_release_stream[slot]) == cudaSuccess) {
            g->unwritten[slot] = 0;
            waits = 0;
        }
        (void)cudaGetLastError(); /* cudaErrorNotReady */
        relaxed_leave(m);
    }
    pthread_mutex_unlock(&g->mu);
    return waits;
}

/* Before the next op takes its slot: a slot whose ready word an earlier op's caller stream
 * has yet to write (that op failed or was released; the stream lags behind) is skipped -
 * its sequence number burnt, as a failed call's is - so that the late write cannot take
 * the word back below the new op's. Where every slot waits so (256 such ops, none written
 * yet), wait for the next one's write up to the client's timeout. */
static int skip_unwritten_slots(struct dash_client *c)
{
    struct dash__signals *g = c->signals;
    for (int32_t skipped = 0; skipped < DASH__SIGNAL_SLOTS; skipped++) {
        const uint64_t seq = g->seq + 1;
        const int32_t slot = (int32_t)(seq % DASH__SIGNAL_SLOTS);
        if (!slot_unwritten(g, slot))
            return 0;
        forget_slot(g, slot, seq, 0);
        g->seq = seq;
    }
    const int32_t slot = (int32_t)((g->seq + 1) % DASH__SIGNAL_SLOTS);
    const int64_t until = dash__now_ms() + c->timeout_ms;
    while (slot_unwritten(g, slot)) {
        if (dash__now_ms() >= until)
            return dash__fail(c, DASH_ETIMEDOUT, "every semaphore slot waits for a caller's "
                              "stream to reach an earlier failed op (%d ms)", c->timeout_ms);
        usleep(200);
    }
    return 0;
}

static int slot_free(struct dash_client *c, const void *arg)
{
    return !c->signals || !c->signals->slot_req[*(const int32_t *)arg];
}

static int op_sent(struct dash_client *c, const void *arg)
{
    (void)c;
    return ((const struct dash__req *)arg)->state != DASH__QUEUED;
}

/* The op without a round trip: the caller's stream writes ready[slot] = seq behind its own
 * work, the request goes out, and the stream waits for done[slot] >= seq, which the
 * daemon's stream writes after the op (or the library, if the op cannot run). Nothing
 * here waits for the daemon unless 256 ops are in flight. An earlier such op's failure is
 * returned by the next call. */
static int signal_op(struct dash_client *c, enum dash__kind kind, const struct dash_attn *a,
                     const struct dash_tensor *const *ts, int nt, void *stream,
                     const struct dash__poison *outputs, struct dash_result *ret_result)
{
    struct dash__signals *g = c->signals;
    int rc = dash__pump_now(c);
    take_release(c);
    dash__reap_detached(c);
    if (rc)
        return rc;
    if ((rc = take_async_failure(c)) != 0)
        return rc;
    /* The op is answered without the caller, who may block in CUDA next, so it must reach
     * a live session now: a session idle for a third of its timeout (the daemon may be about
     * to drop it) is refreshed by a round trip first, and a restore the op waits for is
     * carried through here (below). */
    if (c->session_timeout_ms && dash__now_ms() - c->last_rx_ms > c->session_timeout_ms / 3 &&
        (rc = dash_ping(c, -1, NULL)) != 0)
        return rc;
    /* Nothing is written until the slot is free, so a failed wait leaves seq to the next
     * op: burnt here, the watchdog's release of everything up to `issued` would one day
     * wait on the slot's release stream for a ready word that no stream writes, and every
     * later release of that slot (the poison and done words of failed ops) would never
     * come. A slot whose last op's reply, read while waiting for it, released that op
     * before its caller's stream wrote the ready word is skipped after all. */
    uint64_t seq;
    int32_t slot;
    for (;;) {
        if ((rc = skip_unwritten_slots(c)) != 0)
            return rc;
        seq = g->seq + 1;
        slot = (int32_t)(seq % DASH__SIGNAL_SLOTS);
        if (g->slot_req[slot] &&
            (rc = dash__wait(c, slot_free, &slot, -1, dash__now_ms())) != 0)
            return rc;
        if (!slot_unwritten(g, slot))
            break;
    }
    g->seq = seq; /* burnt from here even if this call fails: ready may be written */
    dash__reap_detached(c);
    pthread_mutex_lock(&g->mu);
    g->poison[slot] = *outputs;
    g->poison[slot].seq = seq;
    pthread_mutex_unlock(&g->mu);
    if (write_value((CUstream)stream, (CUdeviceptr)(uintptr_t)ready_word(g, slot), seq,
                    CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
        (void)cudaGetLastError();
        forget_slot(g, slot, seq, 0);
        return DASH_EINVAL; /* a stream of another device, or not a stream */
    }
    atomic_store(&g->issued, seq);
    struct dash__op_sync sync = DASH__NO_SYNC;
    sync.signal_slot = slot;
    sync.signal_seq = seq;
    uint64_t ticket;
    struct dash__req *r;
    if ((rc = dash__op_submit(c, kind, a, ts, nt, &sync, &ticket, &r)) != 0) {
        forget_slot(g, slot, seq, 1);
        return rc;
    }
    /* nobody waits for it: the next calls read its reply */
    dash__map_del(&c->by_ticket, r->ticket);
    r->ticket = 0;
    r->detached = 1;
    if (r->state != DASH__DONE)
        g->slot_req[slot] = r;
    if (r->state == DASH__QUEUED) {
        /* A failed wait finished r already (dash__wait's fail_queued_signal_ops: released -
         * its ready write held, poison, done word -, counted out of `outstanding`, its slot
         * free): only this return tells it, not the next call too. */
        r->signal_told = 1;
        rc = dash__wait(c, op_sent, r, -1, dash__now_ms());
        if (rc) {
            if (r->state != DASH__DONE) { /* never sent, nor waited for */
                g->slot_req[slot] = NULL;
                forget_slot(g, slot, seq, 1);
                r->signal_slot = -1;
                atomic_fetch_sub(&g->outstanding, 1);
                dash__op_finish(c, r, rc, NULL);
            }
            return rc;
        }
        r->signal_told = 0;
        /* failed while it waited, the wait itself fine (no session to be had: fail_waiting):
         * released, and the next call says so, as for any failure after this call */
        if (r->state == DASH__DONE && r->code)
            dash__signal_tell(c, r);
    }
    if (wait_value((CUstream)stream, (CUdeviceptr)(uintptr_t)done_word(g, slot), seq,
                   CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
        (void)cudaGetLastError();
        forget_slot(g, slot, seq, 1); /* the caller's stream does not wait: poisoned there */
        r->signal_told = 1; /* this return says it (a restore will not send it again) */
        return DASH_EIO;
    }
    if (ret_result) {
        memset(ret_result, 0, sizeof *ret_result);
        ret_result->schedule = a->schedule; /* as asked: the reply is not read here */
        snprintf(ret_result->backend, sizeof ret_result->backend, "cuda");
    }
    return 0;
}

static int stream_op(struct dash_client *c, enum dash__kind kind, const struct dash_attn *a,
                     const struct dash_tensor *const *ts, int nt, void *stream,
                     struct dash_result *ret_result)
{
    if (!c)
        return DASH_EINVAL;
    if (!a)
        return dash__fail(c, DASH_EINVAL, "no attention parameters (NULL)");
    for (int i = 0; i < nt; i++)
        if (!ts[i] || !ts[i]->buf || ts[i]->buf->owner != c || ts[i]->buf->kind != DASH__BUF_CUDA)
            return dash__fail(c, DASH_EINVAL, "tensor %d of a stream-ordered op is %s", i,
                              !ts[i] || !ts[i]->buf ? "missing (NULL)"
                              : ts[i]->buf->owner != c ? "in a buffer of another client"
                                                       : "not in CUDA memory (stream-ordered ops take "
                                                         "device buffers; shared memory goes through "
                                                         "dash_forward / dash_backward)");
    const int device = ts[0]->buf->device;
    for (int i = 1; i < nt; i++)
        if (ts[i]->buf->device != device)
            return dash__fail(c, DASH_EINVAL, "the tensors of one op are on GPUs %d and %d: one op, one GPU",
                              device, ts[i]->buf->device);
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return DASH_ENOSESSION;
    /* A stream capturing a CUDA graph would record the op's ready write (or event record)
     * instead of making it, and dashd's one stream would wait for it for ever, every
     * client's ops behind it: refused before anything is queued (and nothing poisoned,
     * which the capture would record too). */
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    const cudaError_t cap = cudaStreamIsCapturing((cudaStream_t)stream, &capturing);
    if (cap != cudaSuccess)
        (void)cudaGetLastError(); /* not a stream: the ready write says so below */
    if (cap == cudaErrorStreamCaptureImplicit) /* the legacy stream, a blocking one capturing */
        return dash__fail(c, DASH_EINVAL, "the legacy default stream while a blocking stream of its "
                          "device is capturing a CUDA graph: queueing on it would end that capture; "
                          "call it outside the capture, or on a non-blocking stream");
    if (cap == cudaSuccess && capturing != cudaStreamCaptureStatusNone)
        return dash__fail(c, DASH_EINVAL, "the stream is capturing a CUDA graph: dashd computes in "
                          "another process, which a graph cannot record; call it outside the capture");
    const int held = c->events && c->events->device != device     ? c->events->device
                     : c->signals && c->signals->device != device ? c->signals->device
                                                                  : device;
    if (held != device) /* one client, one GPU */
        return dash__fail(c, DASH_EINVAL, "this client orders its ops on GPU %d, this op's tensors are "
                          "on GPU %d: one client, one GPU (connect a client per device)", held, device);
    struct dash__poison outputs;
    int old, rc = dash__outputs_of(c, kind == DASH__FORWARD, a, ts, &outputs);
    if (rc)
        return rc;
    /* From here on, a call that fails poisons the outputs on `stream` before it returns
     * (the daemon has not queued anything that writes them, or has drained it), unless
     * `stream` already waits for the done word: the release (release_slot) poisons then. */
    if ((rc = dash__switch_device(device, &old)) != 0)
        goto out;
    if (!c->signals && c->daemon_signals && !c->no_signals && !c->events &&
        !(c->flags & DASH_CONNECT_STREAM_EVENTS)) {
        rc = signals_make(c, device);
        if (rc == DASH_ENOTSUP) {
            c->no_signals = 1; /* this process cannot: events, for good */
            rc = 0;
        } else if (rc) {
            goto out;
        }
    }
    if (c->signals && c->daemon_signals) {
        rc = signal_op(c, kind, a, ts, nt, stream, &outputs, ret_result);
        goto out;
    }
    /* A failure of an earlier signal-ordered op not yet told (this client used semaphores
     * until a restore brought a daemon without them, which failed the ops it could not
     * take): this call returns it, as signal_op would, rather than leaving it to a
     * dash_sync() the caller may never make. */
    if ((rc = take_async_failure(c)) != 0)
        goto out;
    if (!c->events && (rc = dash__events_make(c, device)) != 0)
        goto out;
    struct dash__events *e = c->events;
    const int32_t w = (int32_t)e->next, r = (int32_t)((e->next + 1) % DASH__EVENT_RING);
    e->next = (e->next + 2) % DASH__EVENT_RING;
    /* Everything the caller queued on the stream so far happens before the daemon reads. */
    if (cudaEventRecord((cudaEvent_t)e->ev[w], (cudaStream_t)stream) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = DASH_EINVAL; /* a stream of another device, or not a stream */
        goto out;
    }
    uint64_t ticket;
    struct dash__op_sync sync = DASH__NO_SYNC;
    sync.wait_slot = w;
    sync.record_slot = r;
    sync.when_queued = 1;
    if ((rc = dash__op_submit(c, kind, a, ts, nt, &sync, &ticket, NULL)) != 0)
        goto out;
    if ((rc = dash__op_run(c, ticket, ret_result)) != 0)
        goto out;
    /* The daemon has queued its record of r: what the caller queues next runs after it. */
    if (!c->events || cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)e->ev[r], 0) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = DASH_EIO;
        goto out;
    }
    e->last_record = r;
out:
    if (rc && rc != DASH_ENOGPU) { /* ENOGPU: the device could not be made current */
        (void)dash__poison_outputs(&outputs, stream);
        (void)cudaGetLastError();
    }
    dash__restore_device(old, device);
    return rc;
}

int dash_forward_stream(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, void *stream, struct dash_result *ret_result)
{
    const struct dash_tensor *ts[] = {q, k, v, out, lse};
    return stream_op(c, DASH__FORWARD, a, ts, 5, stream, ret_result);
}

int dash_backward_stream(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, void *stream,
                         struct dash_result *ret_result)
{
    const struct dash_tensor *ts[] = {q, k, v, out, lse, dout, dq, dk, dv};
    return stream_op(c, DASH__BACKWARD, a, ts, 9, stream, ret_result);
}

#else /* no CUDA in this build */

void dash__signal_release(struct dash_client *c, int32_t slot, uint64_t seq)
{
    (void)c, (void)slot, (void)seq;
}

int dash__signal_released(struct dash_client *c, int32_t slot, uint64_t seq)
{
    (void)c, (void)slot, (void)seq;
    return 0;
}

int dash__signal_completed(struct dash_client *c, int32_t slot, uint64_t seq)
{
    (void)c, (void)slot, (void)seq;
    return 0;
}

void dash__signals_destroy(struct dash_client *c, int in_child)
{
    (void)in_child;
    free(c->signals);
    c->signals = NULL;
}

int dash__signals_settle(struct dash_client *c)
{
    (void)c;
    return 0;
}

void dash__signals_new_daemon(struct dash_client *c, int answered)
{
    (void)c, (void)answered;
}

int dash_sync(struct dash_client *c)
{
    if (!c)
        return DASH_EINVAL;
    int rc = c->async_code;
    c->async_code = 0;
    return rc;
}

int dash_forward_stream(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, void *stream, struct dash_result *ret_result)
{
    (void)q, (void)k, (void)v, (void)out, (void)lse, (void)stream, (void)ret_result;
    return !c || !a ? DASH_EINVAL : DASH_ENOGPU;
}

int dash_backward_stream(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, void *stream,
                         struct dash_result *ret_result)
{
    (void)q, (void)k, (void)v, (void)out, (void)lse, (void)dout, (void)dq, (void)dk, (void)dv;
    (void)stream, (void)ret_result;
    return !c || !a ? DASH_EINVAL : DASH_ENOGPU;
}

#endif
