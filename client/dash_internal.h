// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_internal.h - what the files of libdash share; not installed, not for users.
 *
 *   libdash.c      the client: socket, request table, session state machine, waiting,
 *                  connect/close, ping, stats
 *   dash_shm.c     buffers: shared-memory objects, and what every kind of buffer shares
 *   dash_cuda.c    CUDA buffers: views of cudaMalloc allocations, shared by CUDA IPC handle;
 *                  the event ring
 *   dash_signal.c  the stream-ordered ops: the semaphores (signals) and their watchdog, or
 *                  the event ring where those cannot be used
 *   dash_ops.c     tensors, forward/backward: validation, encoding, tickets
 *
 * Requests. Everything sent to the daemon is a struct dash__req, linked into the client's
 * list from creation until freed. A request is QUEUED (waiting for the session to be
 * restored), SENT (in flight: its wire id is in c->by_wire) or DONE (code and result set,
 * kept until its waiter takes it). Every send uses a fresh wire id, so a late reply to an
 * earlier send of the same request can never be mistaken for the current one: replies whose
 * id is not in by_wire are dropped.
 *
 * Sessions. The client moves through
 *
 *      LOST --Hello sent--> HELLO --Hello ok--> REGISTERING --last buffer--> OK
 *        ^                    |   ^                     |                         |
 *        +--Hello refused-----+   +---- session lost ---+-------------------------+
 *
 * A session is lost when a reply says DASH_ENOSESSION or carries a session_id that is not
 * ours (0 included): the daemon restarted, expired the session, or sees a new connection;
 * or when the socket monitor reports that the connection dropped, noticed before the next
 * request that needs the session is sent, so that it is not sent to whoever answers the
 * reconnection: that peer gets a Hello first.
 *
 * Trust (proto/wire.h). dash_connect() checks an ipc endpoint's file before connecting, and
 * every message received on an ipc endpoint must come from a daemon running as the caller,
 * root, the socket's owner the file check vouched for, or $DASHD_ENDPOINT_OWNER. A reply
 * from anyone else is handled as DASH_EPERM (its contents unread), and a session it seems
 * to belong to is lost, so the Hello that follows is refused too: nothing that needs a
 * session is ever sent to such a peer.
 *
 * The event ring (stream-ordered ops, dash_cuda.c) is registered like one more buffer:
 * RegisterEvents in REGISTERING, counted in regs_in_flight, its state in c->events->reg.
 *
 * On a lost session every live buffer needs registering again (its old id is void), ops in
 * flight go back to QUEUED, and Register/Unregister in flight are dropped. In REGISTERING
 * every buffer not yet registered gets a RegisterBuffer; when the last one has answered,
 * queued ops are sent with the new ids. c->gen counts successful Hellos: only a reply to a
 * request sent in the current generation may declare the session lost, so stale replies
 * cannot start a second restore.
 */
#ifndef DASH_INTERNAL_H
#define DASH_INTERNAL_H

#include "client/dash.h"
#include "proto/wire.h"

#include <pthread.h>

#include <stdint.h>
#include <sys/types.h>

/* Silence after which the daemon is probed (a Ping, or Hello again while one is pending). */
#define DASH__PROBE_MS 1000
/* Longest wait between two sends of an op the daemon refused with a full queue. */
#define DASH__BUSY_BACKOFF_MAX_MS 50
#define DASH__DEFAULT_TIMEOUT_MS 30000
/* How long dash_endpoint_check() waits for a daemon's answer to check who it runs as. */
#define DASH__CHECK_TIMEOUT_MS 2000
/* Sessions lost in a row (without an op or a ping surviving in between) before the library
 * stops restoring and fails what waits: a daemon that drops every session must not keep us
 * busy forever. */
#define DASH__MAX_LOST_STREAK 16
#define DASH__SHM_NAME_MAX 64
#define DASH__NT_MAX 11 /* tensors of a backward, and a packed batch's two offsets */
#define DASH__NAME_MAX 255 /* client name and run tag, bytes */
#define DASH__IPC_HANDLE_BYTES 64 /* sizeof(cudaIpcMemHandle_t) */
#define DASH__UUID_MAX WIRE_UUID_MAX /* "GPU-" + 36 characters + NUL */
#define DASH__EVENT_RING 16 /* interprocess events per client (2 per stream-ordered op) */
#define DASH__VIEW_CACHE 64 /* whole-allocation registrations kept by dash_cuda_view() */
/* Semaphore slots per client (stream-ordered ops in flight without a round trip); a slot
 * is used again only once the daemon has answered its last op. */
#define DASH__SIGNAL_SLOTS 256

/* Internal functions shared across libdash's files stay out of libdash.so's interface. */
#define DASH__HIDDEN __attribute__((visibility("hidden")))

/* ---- a map from nonzero uint64 keys to pointers (open addressing, linear probing) ----- */

struct dash__map {
    uint64_t *keys; /* 0: empty slot */
    void **vals;
    size_t cap;     /* 0 or a power of two; at most half full */
    size_t n;
};

DASH__HIDDEN int dash__map_put(struct dash__map *m, uint64_t key, void *val); /* 0 or DASH_ENOMEM */
DASH__HIDDEN void *dash__map_get(const struct dash__map *m, uint64_t key);     /* NULL if absent */
DASH__HIDDEN void dash__map_del(struct dash__map *m, uint64_t key);            /* absent: no-op */
DASH__HIDDEN void dash__map_free(struct dash__map *m);

/* ---- buffers -------------------------------------------------------------------------- */

enum dash__reg {
    DASH__REG_NONE,    /* not registered in the current session; restore will do it */
    DASH__REG_PENDING, /* a RegisterBuffer is in flight (reg_req) */
    DASH__REG_OK,      /* id is valid in the current session */
    DASH__REG_FAILED,  /* the daemon refused it (reg_code); retried at the next restore */
};

enum dash__buf_kind {
    DASH__BUF_SHM,  /* a shm object this library created, mapped and will unlink */
    DASH__BUF_CUDA, /* a view of the caller's device memory; the caller owns it */
};

struct dash_buffer {
    struct dash_client *owner;
    struct dash_buffer *prev, *next; /* owner->bufs */
    enum dash__buf_kind kind;
    void *data; /* SHM: our mapping; CUDA: the caller's device pointer */
    size_t size;
    char name[DASH__SHM_NAME_MAX]; /* SHM */
    /* CUDA: what every RegisterBuffer of this buffer sends (kept for re-registering after
     * a daemon restart): the allocation's IPC handle, its GPU, where the view starts. */
    unsigned char ipc_handle[DASH__IPC_HANDLE_BYTES];
    char device_uuid[DASH__UUID_MAX];
    uint64_t alloc_offset;
    int device; /* CUDA: the pointer's device ordinal in this process */
    enum dash__reg reg;
    int reg_code;            /* DASH__REG_FAILED: why */
    uint64_t id;             /* DASH__REG_OK: the daemon's id */
    struct dash__req *reg_req; /* DASH__REG_PENDING: the request */
    uint32_t users;          /* tensors of unfinished ops that point here */
};

/* ---- requests ------------------------------------------------------------------------- */

enum dash__kind {
    DASH__HELLO,
    DASH__PROBE, /* a Ping of our own, sent when the daemon has been silent */
    DASH__PING,
    DASH__STATS,
    DASH__REGISTER,
    DASH__UNREGISTER,
    DASH__FORWARD,
    DASH__BACKWARD,
    DASH__GOODBYE, /* sent by dash_close(), nobody waits for its reply */
    DASH__REGISTER_EVENTS, /* the event ring (c->events) */
};

enum dash__state { DASH__QUEUED, DASH__SENT, DASH__DONE };

struct dash__req {
    struct dash__req *prev, *next; /* c->reqs */
    enum dash__kind kind;
    enum dash__state state;
    uint64_t wire_id; /* SENT: the id of the last send, a key of c->by_wire */
    uint64_t gen;     /* c->gen when last sent */
    uint64_t ticket;  /* ops: the caller's handle, a key of c->by_ticket */
    int64_t born_ms;  /* when the caller asked for it */
    int detached;     /* nobody waits: freed when done */
    int code;         /* DONE: 0 or a DASH_E* code */

    /* REGISTER: the buffer, NULL once the buffer was freed while this was in flight (a
     * successful reply is then undone with an Unregister). UNREGISTER: buffer_id. */
    struct dash_buffer *buf;
    uint64_t buffer_id;

    /* FORWARD, BACKWARD */
    struct dash_attn attn;
    struct dash_tensor t[DASH__NT_MAX]; /* q k v out lse [dout dq dk dv] [cu_q cu_k] */
    int nt;
    int32_t *offsets; /* the offsets by value, q's then k's (attn.n_offsets each), or NULL */
    struct dash_result result;
    char message[256]; /* DONE with an error: the daemon's words, if it said any */
    /* audit tag at submission (dash_set_audit) */
    int64_t audit_step; /* -1: none */
    char audit_label[128];
    /* EventSync: slots of the event ring (-1: none), and reply when queued; or a slot of
     * the semaphores (c->signals, -1: none) with this op's sequence number */
    int32_t wait_slot, record_slot;
    int when_queued;
    int32_t signal_slot;
    uint64_t signal_seq;
    int signal_told; /* its call returned its failure already: not reported again */
    /* The daemon's queue was full (DASH_EBUSY): QUEUED until retry_ms, then sent again,
     * backing off from 1 to DASH__BUSY_BACKOFF_MAX_MS, for as long as the client's timeout
     * from born_ms allows (0: no retry due). */
    int64_t retry_ms;
    int busy_backoff_ms;

    /* PING */
    uint64_t token;
    int64_t sent_us;
    uint64_t rtt_us;

    /* STATS: the reply, handed to the waiter */
    Dash__Reply *reply;
};

/* ---- the client ----------------------------------------------------------------------- */

enum dash__session { DASH__S_LOST, DASH__S_HELLO, DASH__S_REGISTERING, DASH__S_OK };

/* The client's ring of interprocess events (dash_cuda.c makes it on the first
 * stream-ordered op). Plain C: the events are cudaEvent_t behind void *. */
struct dash__events {
    int device;                    /* the CUDA device they were made on */
    char device_uuid[DASH__UUID_MAX];
    void *ev[DASH__EVENT_RING];
    unsigned char handle[DASH__EVENT_RING][DASH__IPC_HANDLE_BYTES];
    enum dash__reg reg;            /* as for buffers */
    int reg_code;
    uint32_t base;                 /* REG_OK: the daemon's index of ev[0] */
    struct dash__req *reg_req;     /* REG_PENDING */
    uint32_t next;                 /* the next slot to use */
    int32_t last_record;           /* the slot the daemon recorded last, -1: none */
};

/* The outputs a failed stream-ordered op poisons (dash_poison.c): up to 3 tensors (out and
 * lse; dq, dk and dv), each with its buffer's device address and element size. */
struct dash__poison {
    uint64_t seq; /* signal-ordered: the op's sequence number (0: none) */
    int n;
    struct {
        unsigned char *data; /* the buffer's start (t.offset counts from it) */
        struct dash_tensor t;
        size_t elem;
    } out[3];
};

/* The client's semaphores (dash_signal.c makes them on the first stream-ordered op, when the
 * daemon offers signals): one device allocation of ready[SLOTS], done[SLOTS] and
 * fail[SLOTS], 8-byte words, registered like a buffer. The caller's stream writes
 * ready[slot] = seq, then waits for done[slot] >= seq, which the daemon's stream writes
 * after the op. An op that fails is never released by the daemon: it writes fail[slot] =
 * seq instead, and the library (the watchdog, or the call that reads the reply, whichever
 * comes first: release_slot in dash_signal.c) queues on that slot's release stream a wait
 * for ready[slot] >= seq, the poison of the op's outputs, then done[slot] = seq. */
struct dash__signals {
    int device;
    void *mem;                /* device memory: 3 * DASH__SIGNAL_SLOTS words, zeroed */
    struct dash_buffer *buf;  /* its registration (users held at 1: never an op's) */
    /* Where the library poisons and writes a done word itself: one stream per slot, made
     * at its first release (under mu; release_stream, made with the semaphores, where that
     * fails: then for good, so that a slot's releases stay in order), so that one release
     * waiting for its caller's stream never holds up another's - two failed ops on two of
     * the caller's streams, the first's stream waiting for the second's past its op, would
     * otherwise wait for each other forever. */
    void *release_stream;
    void *slot_release_stream[DASH__SIGNAL_SLOTS];
    /* Under mu: per slot, the seq of an op whose ready word the caller's stream will write
     * but no daemon waits for (released by the library, or whose call failed after the
     * write was queued), with a wait for that write queued on the slot's release stream;
     * 0 once that stream was seen idle (UINT64_MAX: the wait could not be queued, so the
     * slot is never used again). Until then the slot is not used again: a late write of
     * ready[slot] = seq after the next op's seq + 256 would take the word back, and dashd's
     * one stream would wait for that op's word for ever, every client's ops behind it. */
    uint64_t unwritten[DASH__SIGNAL_SLOTS];
    void *poll_stream;        /* where the watchdog reads the done and fail words */
    uint64_t seq;             /* the last sequence number used */
    struct dash__req *slot_req[DASH__SIGNAL_SLOTS]; /* the op in flight per slot, or NULL */
    /* Under mu (the caller's thread and the watchdog): each slot's outputs, and the last
     * seq released (poisoned and done written) by the library; a release happens once. */
    pthread_mutex_t mu;
    struct dash__poison *poison;   /* [DASH__SIGNAL_SLOTS] */
    uint64_t *released_seq;        /* [DASH__SIGNAL_SLOTS] */
    /* The watchdog (dash_signal.c): a thread that, while ops are in flight, watches the done
     * words, and if the daemon's process is gone (or, with no pid known, nothing moved for
     * ten timeouts) writes every done word up to `issued` itself, so that a caller blocked
     * in a CUDA synchronise is released even when it never calls us again; `released`
     * then tells the next call to fail those ops. Shared with it: these atomics only. */
    pthread_t watchdog;
    int watchdog_started;
    _Atomic int64_t daemon_pid; /* from the daemon's credentials (at each Hello); -1 unknown */
    int64_t patience_ms;
    _Atomic int stop, released;
    _Atomic uint64_t issued;     /* the last seq whose ready word the caller's stream writes */
    _Atomic uint32_t outstanding; /* ops sent and not answered */
};

struct dash_client {
    void *zctx, *sock;
    char *endpoint, *name, *run_tag;
    unsigned rank, world_size; /* world_size 0: not part of a distributed run */
    int timeout_ms;
    unsigned flags;
    pid_t pid; /* the process that connected (fork check) */

    enum dash__session state;
    uint64_t session_id; /* valid in REGISTERING and OK */
    uint64_t gen;        /* successful Hellos so far */
    int hello_code;      /* the last Hello's failure, 0 if none */
    int lost_streak;
    struct dash__req *hello; /* HELLO: the request in flight */
    struct dash__req *probe; /* the probe in flight, if any */
    unsigned regs_in_flight;

    uint64_t next_wire, next_ticket, ping_seed;
    struct dash__map by_wire, by_ticket;
    struct dash__req *reqs, *reqs_tail; /* oldest first */
    struct dash_buffer *bufs;
    struct dash__events *events; /* NULL until the first stream-ordered op */
    struct dash__signals *signals; /* likewise, when the daemon offers signals */
    int daemon_signals;          /* the last HelloReply offered signals */
    uint32_t session_timeout_ms; /* the last HelloReply's, 0: unknown */
    int no_signals;              /* this process cannot use them: events instead */
    int async_code;              /* the first failure of a signal-ordered op not yet told */
    int carrying;                /* dash__carry_restore() is waiting (no second one inside) */
    char async_msg[256];
    int64_t audit_step;          /* dash_set_audit: -1 none */
    char audit_label[128];
    char last_error[256];        /* dash_last_error() */
    /* dash_cuda_view(): registrations of whole allocations, by IPC handle (LRU) */
    struct {
        struct dash_buffer *buf;
        unsigned char handle[DASH__IPC_HANDLE_BYTES];
        uint64_t alloc_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID (never reused), 0: unknown */
        uint64_t last_use;
    } views[DASH__VIEW_CACHE];
    int n_views;
    uint64_t view_clock;

    int64_t last_rx_ms; /* the daemon's last sign of life */
    int64_t last_probe_ms;

    /* Trust (see the top of this file) */
    int check_peer;      /* an ipc endpoint: every message's credentials are checked */
    int64_t owner;       /* the uid the endpoint's file vouched for, -1: none */
    char peer_ok[128];   /* the last Peer-Address that passed, "" if none */
    char refusal[256];   /* why the last peer (or endpoint) was refused, "" if none */
    void *monitor;       /* PAIR receiving the DEALER's disconnect events; NULL: none */
    int peer_gone;       /* a disconnect reported since the last Hello was sent */
};

/* dash_reach.c: whether anything listens at an ipc endpoint's socket file, by one
 * connect(2) of our own. 0 (something does, or there is no file to look at: an abstract
 * name, another transport), or with a sentence naming the endpoint in why: DASH_ENOENT (no
 * socket file), DASH_ECONNREFUSED (nothing listens on it, or it is not a socket) or
 * DASH_EACCES (the caller may not open it, with its and its directory's owner and mode). */
DASH__HIDDEN int dash__reach(const char *endpoint, char *why, size_t len);

/* dash_cuda.c: the PCI bus id ("0000:3B:00.0") of CUDA device cuda_device. 0, or
 * DASH_ENOGPU (no such device, no driver, or a build without CUDA). */
DASH__HIDDEN int dash__cuda_busid(int cuda_device, char *buf, size_t len);

/* Write a failure's text for dash_last_error() and return code. */
DASH__HIDDEN int dash__fail(struct dash_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CLOCK_MONOTONIC, in milliseconds and microseconds. */
DASH__HIDDEN int64_t dash__now_ms(void);
DASH__HIDDEN int64_t dash__now_us(void);

/* A new request of c (state QUEUED, linked into c->reqs), or NULL (out of memory). */
DASH__HIDDEN struct dash__req *dash__req_new(struct dash_client *c, enum dash__kind kind);
/* Unlink r from c and every map and free it (and its reply). */
DASH__HIDDEN void dash__req_free(struct dash_client *c, struct dash__req *r);

/* libdash.c's session machinery, used by dash_connect.c. */
/* A zmq failure as one of our codes: its own errno values (ETERM...) are not ours. */
DASH__HIDDEN int dash__zmq_code(int e);
/* Encode r with a fresh wire id and send it: 0 (r is SENT) or a failure (r unchanged). */
DASH__HIDDEN int dash__send(struct dash_client *c, struct dash__req *r);
/* Send (or send again) the Hello. */
DASH__HIDDEN int dash__start_hello(struct dash_client *c);
/* If the connection dropped since the Hello, start a new one before what needs a session. */
DASH__HIDDEN void dash__notice_disconnect(struct dash_client *c);

/* Send r now if the session allows it, else queue it for the restore (starting one if the
 * client is LOST). Returns 0 or a local failure (r is then untouched and not sent). */
DASH__HIDDEN int dash__submit(struct dash_client *c, struct dash__req *r);

/* Register b (reg NONE or FAILED) if the session allows it now; else the restore will. */
DASH__HIDDEN int dash__register(struct dash_client *c, struct dash_buffer *b);

/* Send UnregisterBuffer{id} and forget about it. */
DASH__HIDDEN void dash__unregister_detached(struct dash_client *c, uint64_t id);

/* Read and handle replies until done(c, arg) says yes. deadline_ms: absolute, -1 none.
 * Gives up with DASH_ETIMEDOUT at the deadline, or once the daemon has been silent for
 * the client's timeout counted from max(since_ms, its last reply); probes a silent daemon.
 * Returns 0 or a negative code. */
DASH__HIDDEN int dash__wait(struct dash_client *c,
                            int (*done)(struct dash_client *, const void *), const void *arg,
                            int64_t deadline_ms, int64_t since_ms);

/* Read and handle whatever has arrived, without blocking (probing if due). */
DASH__HIDDEN int dash__pump_now(struct dash_client *c);

/* Before a call returns to its caller: a signal-ordered op waiting in the library for a
 * restore to finish (re-queued by a lost session) is sent only by this thread, and the
 * caller may block in CUDA on it as soon as we return; so the restore is carried through
 * here (as long as the daemon shows signs of life), and the ops it cannot send are failed
 * (poisoned and released; the next call reports it). */
DASH__HIDDEN void dash__carry_restore(struct dash_client *c);

/* dash_ops.c: fill the Request m with r's Forward or Backward body, its TensorRefs naming
 * the buffers' current ids, using the caller's storage st (which must outlive m). Returns
 * 0, or why the op cannot be sent now (a buffer not registered in this session). */
struct dash__op_storage {
    Dash__AuditTag audit;
    Dash__EventSync sync;
    Dash__AttnParams params;
    Dash__TensorRef refs[DASH__NT_MAX];
    Dash__Varlen varlen;
    Dash__Forward fwd;
    Dash__Backward bwd;
};
DASH__HIDDEN int dash__op_encode(const struct dash_client *c, struct dash__req *r,
                                 Dash__Request *m, struct dash__op_storage *st);

/* How an op is ordered on the GPU: nothing (all -1, 0), the event ring's slots, or a
 * semaphore slot of c->signals with its sequence number. */
struct dash__op_sync {
    int32_t wait_slot, record_slot;
    int when_queued;
    int32_t signal_slot;
    uint64_t signal_seq;
};
#define DASH__NO_SYNC ((struct dash__op_sync){-1, -1, 0, -1, 0})

/* dash_ops.c: validate and submit an op (kind FORWARD or BACKWARD; ts: nt tensors, lse
 * at 4) ordered by sync. 0 and *ret_ticket and *ret_req (the request, which the caller
 * may detach), or a code (nothing sent). */
DASH__HIDDEN int dash__op_submit(struct dash_client *c, enum dash__kind kind,
                                 const struct dash_attn *a, const struct dash_tensor *const *ts,
                                 int nt, const struct dash__op_sync *sync,
                                 uint64_t *ret_ticket, struct dash__req **ret_req);

/* dash_poison.c: a 2-D run of bytes for cudaMemset2DAsync: `height` rows of `width`
 * bytes, `pitch` (>= width) apart, from `offset` in the tensor's buffer. */
struct dash__run {
    uint64_t offset, width, pitch, height;
};

/* dash_poison.c: the bytes a strided view spans from its element 0 - (the last element's
 * index + 1) * elem - for ndim 1..4, shapes >= 1 and strides >= 0 in elements: 0 and
 * *ret_bytes, or DASH_EINVAL (a bad dim, or past 64 bits). */
DASH__HIDDEN int dash__view_span(int32_t ndim, const int64_t *shape, const int64_t *strides,
                                 uint64_t elem, uint64_t *ret_bytes);

/* dash_poison.c: whether every element of t (elem bytes each) lies inside t->buf, strides
 * and shape >= 0: 0, or DASH_EINVAL / DASH_EBOUNDS with the reason in why. */
DASH__HIDDEN int dash__tensor_check(const struct dash_tensor *t, size_t elem, char *why,
                                    size_t len);

/* dash_poison.c: call fn for each run covering exactly t's elements (t checked); stops at
 * fn's first nonzero return, which it returns. */
DASH__HIDDEN int dash__tensor_runs(const struct dash_tensor *t, size_t elem,
                                   int (*fn)(void *ctx, const struct dash__run *run), void *ctx);

/* dash_poison.c: a stream-ordered op's outputs (forward: ts[3] out and ts[4] lse; else
 * ts[6..8] dq, dk, dv) into *ret, each checked to lie inside its buffer so that poisoning
 * it is safe (dash__tensor_check). 0, or its code with the reason in c->last_error. */
DASH__HIDDEN int dash__outputs_of(struct dash_client *c, int forward, const struct dash_attn *a,
                                  const struct dash_tensor *const *ts, struct dash__poison *ret);

/* dash_poison.c (CUDA builds): queue on stream (a cudaStream_t) every byte of p's outputs
 * = 0xFF, one cudaMemset2DAsync per run. 0 or DASH_EIO (the rest is still tried). */
DASH__HIDDEN int dash__poison_outputs(const struct dash__poison *p, void *stream);

/* dash_ops.c: a signal-ordered op r that failed (r->code) is reported by the next call
 * (c->async_code), unless an earlier failure waits there already. */
DASH__HIDDEN void dash__signal_tell(struct dash_client *c, const struct dash__req *r);

/* dash_ops.c: free the detached ops that have finished (signal-ordered ones). */
DASH__HIDDEN void dash__reap_detached(struct dash_client *c);

/* dash_signal.c: poison the op's outputs and write done[slot] = seq from here (an op the
 * daemon will not finish, or failed), so that the caller's stream waiting for it goes on
 * past the poison; once per op, whoever comes first (release_slot). */
DASH__HIDDEN void dash__signal_release(struct dash_client *c, int32_t slot, uint64_t seq);

/* dash_signal.c: whether op seq of slot was released already (its outputs poisoned, the
 * caller's stream gone on past it): such an op must never be sent again. */
DASH__HIDDEN int dash__signal_released(struct dash_client *c, int32_t slot, uint64_t seq);

/* dash_signal.c: whether a daemon wrote op seq's done word itself - it ran the op to the end
 * (a failure writes the fail word instead, and a release of ours is what
 * dash__signal_released tells) - read from the device now. For a restore: such an op's
 * reply was lost with its daemon, and the caller's stream has gone on past it. */
DASH__HIDDEN int dash__signal_completed(struct dash_client *c, int32_t slot, uint64_t seq);

/* dash_signal.c: a Hello went out (answered 0: not yet) or succeeded (1): the watchdog
 * watches the process that answered it, and none in between. */
DASH__HIDDEN void dash__signals_new_daemon(struct dash_client *c, int answered);

/* dash_signal.c: wait (as long as the daemon shows signs of life) until every
 * signal-ordered op is answered; those that cannot be are failed here (their done words
 * written). 0 or why the wait ended. */
DASH__HIDDEN int dash__signals_settle(struct dash_client *c);

/* dash_signal.c: free c->signals (after its ops are answered or released); nothing CUDA in
 * a forked child. */
DASH__HIDDEN void dash__signals_destroy(struct dash_client *c, int in_child);

/* dash_ops.c: wait for a ticket the caller keeps to itself, and drop it. */
DASH__HIDDEN int dash__op_run(struct dash_client *c, uint64_t ticket,
                              struct dash_result *ret_result);

/* libdash.c: register c->events (reg NONE or FAILED) if the session allows it now. */
DASH__HIDDEN int dash__register_events(struct dash_client *c);

/* dash_cuda.c: wait for the daemon's last record on the ring, destroy the events and
 * free c->events (nothing CUDA in a forked child: only the memory). */
DASH__HIDDEN void dash__events_destroy(struct dash_client *c, int in_child);

/* dash_cuda.c (CUDA builds): make the ring on `device` (current) and register it, waiting
 * for the daemon. 0, or a code (c->events is then NULL). */
DASH__HIDDEN int dash__events_make(struct dash_client *c, int device);

/* dash_cuda.c (CUDA builds): make `device` current, saving the caller's in *ret_old (-1 if
 * unknown): 0 or DASH_ENOGPU. Undo with dash__restore_device(old, device) either way. */
DASH__HIDDEN int dash__switch_device(int device, int *ret_old);
DASH__HIDDEN void dash__restore_device(int old, int device);

/* dash_signal.c (CUDA builds): look up the driver's 64-bit stream memory operations
 * (cuStreamWaitValue64, cuStreamWriteValue64) the semaphores need; left NULL where the
 * driver lacks them. Called once, by dash_cuda.c's lookup of its own driver entry points
 * (under its pthread_once), which every CUDA buffer's registration makes first. */
DASH__HIDDEN void dash__find_stream_mem_ops(void);

/* Complete op r with code (and, for 0, rep's OpResult; none there is DASH_EPROTO), and
 * give its buffers back. Does nothing if r is already DONE. */
DASH__HIDDEN void dash__op_finish(struct dash_client *c, struct dash__req *r, int code,
                                  const Dash__Reply *rep);

/* dash_shm.c: unlink b from c->bufs, unmap it and shm_unlink its name if unlink_name (shm
 * buffers; a CUDA buffer's memory is the caller's), free it; a registration in flight is
 * orphaned. Talks to nobody. */
DASH__HIDDEN void dash__buffer_destroy(struct dash_client *c, struct dash_buffer *b,
                                       int unlink_name);

/* dash_shm.c: link a filled-in buffer b (owner, kind, data, size and the kind's fields
 * set) into c->bufs and register it, waiting for the daemon's answer. 0, or a code, and
 * b is then destroyed (its shm object unlinked). */
DASH__HIDDEN int dash__buffer_adopt(struct dash_client *c, struct dash_buffer *b);

#endif
