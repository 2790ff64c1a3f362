// SPDX-License-Identifier: BSD-3-Clause
/*
 * server.c - see server.h.
 *
 * The wire (ZMTP 3.1, rfc.zeromq.org 37/ZMTP; 3.0 peers speak the same subset):
 *
 *   greeting  64 bytes: FF, 8 bytes padding, 7F, major 3, minor, mechanism "NULL" padded to
 *             20 bytes, as-server, 31 bytes filler. We send ours at once (a libzmq peer
 *             waits for our signature before it sends its version).
 *   frame     flags (bit 0 MORE, bit 1 LONG, bit 2 COMMAND, the rest 0), size (1 byte, or
 *             8 bytes big-endian when LONG), body.
 *   command   body = name length (1 byte), name, data. READY's data is properties: name
 *             length (1 byte), name, value length (4 bytes big-endian), value. We say
 *             Socket-Type ROUTER and accept DEALER peers only. PING (TTL, context) gets
 *             PONG (context). ERROR (reason) ends the connection.
 *
 * A connection's life: accepted (counted against max_connections) -> C_GREETING -> their
 * greeting -> C_READY -> their READY -> C_OPEN: frames are messages -> C_CLOSING: out of
 * the routing table at once (sends get -EHOSTUNREACH), its handle closed when what was
 * queued has left (or at once), freed in the close callback.
 */
#include "server.h"

#include "log.h"

#include "proto/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define GREETING_LEN 64
#define MECHANISM_POS 12
#define MECHANISM_LEN 20
#define ZMTP_MAJOR 3
#define ZMTP_MINOR 1
#define FLAG_MORE 0x01
#define FLAG_LONG 0x02
#define FLAG_COMMAND 0x04
#define FLAGS_KNOWN (FLAG_MORE | FLAG_LONG | FLAG_COMMAND)
#define SHORT_HEADER 2
#define LONG_HEADER 9
#define COMMAND_MAX 4096        /* READY with a 255-byte identity is far below this */
#define PING_CONTEXT_MAX 16
#define CONN_BUF_MIN 4096       /* input buffer of a connection between large frames */
#define CONN_BUCKETS 4096
#define SWEEP_MS 1000
#define LISTEN_BACKLOG 512
#define LOG_EVERY_NS 1000000000ull

enum conn_state { C_GREETING, C_READY, C_OPEN, C_CLOSING };

union stream_handle {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
};

struct conn {
    union stream_handle h; /* first: the handle's memory lives until on_conn_closed */
    struct server *s;
    uint64_t id;
    unsigned char rid[SERVER_RID_LEN];
    int64_t uid, pid;
    int has_session; /* dispatch said Hello made a session on it (server_set_session) */
    enum conn_state state;
    int paused;           /* reading stopped while too much waits to be sent */
    uint64_t deadline_ns; /* of the handshake */
    /* Unparsed input: at most one frame and the start of the next. */
    unsigned char *in;
    size_t in_len, in_cap;
    struct conn *hash_next; /* in the routing table while not C_CLOSING */
    struct conn *prev, *next; /* in the list until freed */
};

struct server {
    uv_loop_t *loop;
    union stream_handle listener;
    int is_tcp;
    uv_timer_t sweep;
    uv_timer_t linger;
    int linger_started;
    server_msg_fn on_msg;
    server_gone_fn on_gone;
    void *ctx;
    struct conn *bucket[CONN_BUCKETS];
    struct conn *head;
    uint32_t n_conns; /* in the list: each holds a file descriptor */
    uint32_t max_conns;
    uint32_t per_client; /* connections one process (uid, pid) may hold; 0: no cap */
    uint64_t next_id;
    uint64_t refused, refused_logged, last_refusal_log_ns; /* for the log */
    /* Bytes of replies waiting in our write queues (what the kernel's socket buffers did
     * not take), all connections together, and the cap on it (0: none). */
    uint64_t wq_total, reply_bytes;
    int closed;
};

/* Our greeting followed by our READY, sent as soon as a peer connects. */
static const unsigned char hello_bytes[] = {
    /* greeting: signature, version, mechanism "NULL", as-server 0, filler */
    0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, ZMTP_MAJOR, ZMTP_MINOR,
    'N', 'U', 'L', 'L', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* READY: a short command frame of 28 bytes */
    FLAG_COMMAND, 28, 5, 'R', 'E', 'A', 'D', 'Y',
    11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 6, 'R', 'O', 'U', 'T', 'E', 'R',
};
_Static_assert(sizeof hello_bytes == GREETING_LEN + SHORT_HEADER + 28, "greeting + READY");

static uint64_t get_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* ---- the routing table ------------------------------------------------------------------ */

static size_t bucket_of(uint64_t id)
{
    return (size_t)(id % CONN_BUCKETS);
}

static struct conn *find(const struct server *s, const void *rid, size_t rid_len)
{
    if (rid_len != SERVER_RID_LEN)
        return NULL;
    uint64_t id = 0;
    memcpy(&id, rid, sizeof id);
    for (struct conn *c = s->bucket[bucket_of(id)]; c; c = c->hash_next)
        if (c->id == id)
            return c;
    return NULL;
}

static void unhash(struct server *s, struct conn *c)
{
    struct conn **pp = &s->bucket[bucket_of(c->id)];
    while (*pp && *pp != c)
        pp = &(*pp)->hash_next;
    if (*pp)
        *pp = c->hash_next;
    c->hash_next = NULL;
}

/* ---- ending connections ----------------------------------------------------------------- */

static void on_linger(uv_timer_t *t);

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct server *s = c->s;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    free(c->in);
    free(c);
    /* Shutting down and the last connection is gone: the linger timer has nothing to wait
     * for. */
    if (s->closed && !s->head && s->linger_started && !uv_is_closing((uv_handle_t *)&s->linger))
        uv_close((uv_handle_t *)&s->linger, NULL);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    uv_handle_t *h = (uv_handle_t *)req->handle;
    free(req);
    if (!uv_is_closing(h))
        uv_close(h, on_conn_closed);
}

/* Take c out of service. graceful: what is queued for it leaves first. The gone callback
 * runs for a connection that had finished its handshake. `why` (may be NULL: the peer
 * closed) is logged, as a warning when the peer broke the protocol (`broke_rules`). */
__attribute__((format(printf, 4, 5))) static void conn_end(struct conn *c, int graceful,
                                                          int broke_rules, const char *why, ...)
{
    struct server *s = c->s;
    if (c->state == C_CLOSING)
        return;
    enum conn_state was = c->state;
    c->state = C_CLOSING;
    c->has_session = 0; /* its session goes with it (on_gone); until freed it holds a slot */
    unhash(s, c);
    if (why) {
        char msg[256];
        va_list ap;
        va_start(ap, why);
        vsnprintf(msg, sizeof msg, why, ap);
        va_end(ap);
        if (broke_rules)
            log_warn("connection %" PRIu64 " (pid %" PRId64 ", uid %" PRId64 "): %s; disconnecting",
                     c->id, c->pid, c->uid, msg);
        else
            log_debug("connection %" PRIu64 ": %s", c->id, msg);
    }
    (void)uv_read_stop(&c->h.stream);
    int closed = 0;
    if (graceful && uv_stream_get_write_queue_size(&c->h.stream) > 0) {
        uv_shutdown_t *req = malloc(sizeof *req);
        if (req && uv_shutdown(req, &c->h.stream, on_shutdown) == 0) {
            closed = 1;
            /* a peer that never reads would keep it (and its slot) for ever: on_sweep */
            c->deadline_ns = uv_hrtime() + (uint64_t)SERVER_CLOSE_MS * 1000000u;
        } else {
            free(req);
        }
    }
    if (!closed)
        uv_close(&c->h.handle, on_conn_closed);
    if (was == C_OPEN && s->on_gone && !s->closed)
        s->on_gone(s->ctx, c->rid, SERVER_RID_LEN);
}

/* ---- writing ---------------------------------------------------------------------------- */

struct wreq {
    uv_write_t req;
    size_t len;
    unsigned char data[];
};

static void process(struct conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

/* Whether c should stop being read: too much waits for it, or the replies waiting for
 * all connections passed the cap and some of them are c's. Read again (with hysteresis)
 * once its own queue is half the pause mark and the total is under the cap, or its own
 * queue is empty: a client that reads its replies is never held up for long by those
 * that do not. */
static int should_pause(const struct conn *c)
{
    size_t q = uv_stream_get_write_queue_size(&c->h.stream);
    return q > SERVER_WQ_PAUSE || (c->s->reply_bytes && c->s->wq_total > c->s->reply_bytes && q > 0);
}

static int may_resume(const struct conn *c)
{
    size_t q = uv_stream_get_write_queue_size(&c->h.stream);
    return q == 0 || (q <= SERVER_WQ_PAUSE / 2 &&
                      (!c->s->reply_bytes || c->s->wq_total <= c->s->reply_bytes));
}

static void on_written(uv_write_t *req, int status)
{
    struct conn *c = req->handle->data;
    struct wreq *w = (struct wreq *)(void *)req;
    c->s->wq_total -= w->len;
    free(w);
    if (status < 0) {
        if (status != UV_ECANCELED)
            conn_end(c, 0, 0, "write failed: %s", uv_strerror(status));
        return;
    }
    if (c->paused && c->state != C_CLOSING && may_resume(c)) {
        c->paused = 0;
        process(c); /* what arrived before the pause first */
        if (c->state != C_CLOSING && !c->paused)
            (void)uv_read_start(&c->h.stream, on_alloc, on_read);
    }
}

/* Write a then b (either may be empty), in order after what is queued. 0 or a libuv error. */
static int conn_write(struct conn *c, const void *a, size_t alen, const void *b, size_t blen)
{
    uv_buf_t bufs[2] = {uv_buf_init((char *)a, (unsigned)alen), uv_buf_init((char *)b, (unsigned)blen)};
    size_t total = alen + blen, done = 0;
    int r = uv_try_write(&c->h.stream, bufs, 2);
    if (r >= 0)
        done = (size_t)r;
    else if (r != UV_EAGAIN)
        return r;
    if (done == total)
        return 0;
    struct wreq *w = malloc(sizeof *w + (total - done));
    if (!w)
        return UV_ENOMEM;
    w->len = total - done;
    size_t skip_a = done < alen ? done : alen;
    memcpy(w->data, (const unsigned char *)a + skip_a, alen - skip_a);
    size_t skip_b = done - skip_a;
    memcpy(w->data + (alen - skip_a), (const unsigned char *)b + skip_b, blen - skip_b);
    uv_buf_t rest = uv_buf_init((char *)w->data, (unsigned)w->len);
    r = uv_write(&w->req, &c->h.stream, &rest, 1, on_written);
    if (r) {
        free(w);
        return r;
    }
    c->s->wq_total += w->len;
    return 0;
}

/* A frame: flags, then body. */
static int conn_write_frame(struct conn *c, unsigned flags, const void *body, size_t len)
{
    unsigned char hdr[LONG_HEADER];
    size_t hlen;
    if (len <= 255) {
        hdr[0] = (unsigned char)flags;
        hdr[1] = (unsigned char)len;
        hlen = SHORT_HEADER;
    } else {
        hdr[0] = (unsigned char)(flags | FLAG_LONG);
        for (int i = 0; i < 8; i++)
            hdr[1 + i] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
        hlen = LONG_HEADER;
    }
    return conn_write(c, hdr, hlen, body, len);
}

/* ERROR command with a reason (at most 255 bytes), then a graceful end. */
static void conn_refuse(struct conn *c, const char *reason)
{
    unsigned char body[1 + 5 + 1 + 255];
    size_t n = strlen(reason) > 255 ? 255 : strlen(reason);
    body[0] = 5;
    memcpy(body + 1, "ERROR", 5);
    body[6] = (unsigned char)n;
    memcpy(body + 7, reason, n);
    (void)conn_write_frame(c, FLAG_COMMAND, body, 7 + n);
    conn_end(c, 1, 1, "%s", reason);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* The peer's greeting (the first `avail` bytes of it): -1 when it cannot be ZMTP 3 with the
 * NULL mechanism, 0 when it may still be, 1 when it is whole and good. */
static int check_greeting(const unsigned char *p, size_t avail)
{
    if (avail >= 1 && p[0] != 0xff)
        return -1; /* ZMTP 1.0, or not ZeroMQ at all */
    if (avail >= 10 && !(p[9] & 0x01))
        return -1; /* ZMTP 1.0 with a long identity */
    if (avail >= 11 && p[10] < ZMTP_MAJOR)
        return -1; /* ZMTP 2.0 */
    if (avail < GREETING_LEN)
        return 0;
    static const char null_mech[MECHANISM_LEN] = "NULL";
    return memcmp(p + MECHANISM_POS, null_mech, MECHANISM_LEN) == 0 ? 1 : -1;
}

/* READY's properties: 0 if Socket-Type is DEALER, else -1 with the reason. */
static int check_ready(const unsigned char *body, size_t len, const char **ret_why)
{
    if (len < 6 || body[0] != 5 || memcmp(body + 1, "READY", 5) != 0) {
        *ret_why = "expected the READY command";
        return -1;
    }
    int dealer = 0;
    for (size_t pos = 6; pos < len;) {
        size_t nlen = body[pos++];
        if (pos + nlen + 4 > len) {
            *ret_why = "malformed READY properties";
            return -1;
        }
        const unsigned char *name = body + pos;
        pos += nlen;
        uint64_t vlen = get_be(body + pos, 4);
        pos += 4;
        if (vlen > len - pos) {
            *ret_why = "malformed READY properties";
            return -1;
        }
        if (nlen == 11 && strncasecmp((const char *)name, "Socket-Type", 11) == 0)
            dealer = vlen == 6 && memcmp(body + pos, "DEALER", 6) == 0;
        pos += (size_t)vlen;
    }
    if (!dealer) {
        *ret_why = "dashd serves ZeroMQ DEALER sockets only";
        return -1;
    }
    return 0;
}

/* A command on an open connection. */
static void on_command(struct conn *c, const unsigned char *body, size_t len)
{
    size_t nlen = len ? body[0] : 0;
    if (len < 1 + nlen) {
        conn_end(c, 0, 1, "malformed command");
        return;
    }
    const unsigned char *name = body + 1, *data = body + 1 + nlen;
    size_t dlen = len - 1 - nlen;
    if (nlen == 4 && memcmp(name, "PING", 4) == 0) {
        /* PING: TTL (2 bytes), context (0..16 bytes); PONG echoes the context. */
        if (dlen < 2 || dlen - 2 > PING_CONTEXT_MAX) {
            conn_end(c, 0, 1, "malformed PING");
            return;
        }
        unsigned char pong[1 + 4 + PING_CONTEXT_MAX];
        pong[0] = 4;
        memcpy(pong + 1, "PONG", 4);
        memcpy(pong + 5, data + 2, dlen - 2);
        if (conn_write_frame(c, FLAG_COMMAND, pong, 5 + dlen - 2) != 0)
            conn_end(c, 0, 0, "cannot answer PING");
    } else if (nlen == 4 && memcmp(name, "PONG", 4) == 0) {
        /* we send no PING; a stray PONG costs nothing */
    } else if (nlen == 5 && memcmp(name, "ERROR", 5) == 0) {
        conn_end(c, 0, 0, "the peer sent ERROR");
    } else {
        conn_end(c, 0, 1, "unexpected command '%.*s'", (int)nlen, (const char *)name);
    }
}

/* Parse what c->in holds, hand over every whole message, keep the rest. */
static void process(struct conn *c)
{
    struct server *s = c->s;
    size_t pos = 0, need = 0;
    const uint64_t arrived = uv_hrtime();
    while (c->state != C_CLOSING && !c->paused) {
        const unsigned char *p = c->in + pos;
        size_t avail = c->in_len - pos;
        if (c->state == C_GREETING) {
            int g = check_greeting(p, avail);
            if (g < 0) {
                conn_end(c, 0, 1, "not a ZMTP 3 peer with the NULL mechanism");
                break;
            }
            if (g == 0)
                break;
            pos += GREETING_LEN;
            c->state = C_READY;
            continue;
        }
        if (avail < SHORT_HEADER)
            break;
        unsigned flags = p[0];
        if (flags & ~FLAGS_KNOWN) {
            conn_end(c, 0, 1, "frame flags 0x%02x", flags);
            break;
        }
        size_t hlen = flags & FLAG_LONG ? LONG_HEADER : SHORT_HEADER;
        if (avail < hlen)
            break;
        uint64_t size = flags & FLAG_LONG ? get_be(p + 1, 8) : p[1];
        uint64_t limit = flags & FLAG_COMMAND ? COMMAND_MAX : WIRE_MAX_MESSAGE;
        if (size > limit) {
            conn_end(c, 0, 1, "a frame of %" PRIu64 " bytes (the limit is %" PRIu64 ")", size,
                     limit);
            break;
        }
        if (avail < hlen + size) {
            need = hlen + (size_t)size;
            break;
        }
        const unsigned char *body = p + hlen;
        pos += hlen + (size_t)size;
        if (c->state == C_READY) {
            const char *why = NULL;
            if (!(flags & FLAG_COMMAND) || (flags & FLAG_MORE) ||
                check_ready(body, (size_t)size, &why) != 0) {
                conn_refuse(c, why ? why : "expected the READY command");
                break;
            }
            c->state = C_OPEN;
            continue;
        }
        if (flags & FLAG_COMMAND) {
            on_command(c, body, (size_t)size);
            continue;
        }
        struct server_msg m = {.rid = c->rid, .rid_len = SERVER_RID_LEN, .data = body,
                               .len = (size_t)size, .multipart = !!(flags & FLAG_MORE),
                               .peer_uid = c->uid, .peer_pid = c->pid, .arrived_ns = arrived};
        s->on_msg(s->ctx, &m);
        if (m.multipart) {
            /* One frame per message: what follows would be buffered for nothing. */
            conn_end(c, 1, 1, "a message of more than one frame");
            break;
        }
    }
    if (c->state == C_CLOSING)
        return;
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
    /* Room for the frame under way; back to the small buffer between large frames. */
    size_t want = need > CONN_BUF_MIN ? need : CONN_BUF_MIN;
    if (want < c->in_len)
        want = c->in_len;
    if (want != c->in_cap) {
        unsigned char *in = realloc(c->in, want);
        if (!in) {
            if (want > c->in_cap)
                conn_end(c, 0, 0, "out of memory for a %zu-byte frame", want);
            return;
        }
        c->in = in;
        c->in_cap = want;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct conn *c = h->data;
    /* process() leaves room for the frame under way, so this is never 0 mid-frame */
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    struct conn *c = st->data;
    if (n < 0) {
        if (n == UV_EOF || n == UV_ECONNRESET)
            conn_end(c, 0, 0, NULL);
        else
            conn_end(c, 0, 0, "read failed: %s", uv_strerror((int)n));
        return;
    }
    c->in_len += (size_t)n;
    process(c);
}

/* ---- accepting ------------------------------------------------------------------------------ */

static void on_refused_closed(uv_handle_t *h)
{
    free(h->data);
}

static void note_refusal(struct server *s, const char *why)
{
    s->refused++;
    uint64_t now = uv_hrtime();
    if (now - s->last_refusal_log_ns >= LOG_EVERY_NS) {
        log_warn("refused %" PRIu64 " connection(s): %s", s->refused - s->refused_logged, why);
        s->refused_logged = s->refused;
        s->last_refusal_log_ns = now;
    }
}

static void peer_creds(struct conn *c)
{
    c->uid = c->pid = -1;
    uv_os_fd_t fd;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (!c->s->is_tcp && uv_fileno(&c->h.handle, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.pid > 0) {
        c->uid = cr.uid;
        c->pid = cr.pid;
    }
}

/* The connections without a session that the peer process of c holds already (c not yet
 * listed), closing ones included (each still holds a descriptor and a slot until it is
 * freed); 0 for a peer without credentials (tcp://): it is a client of its own. Those with
 * a session are the session cap's to count. */
static uint32_t conns_of(const struct server *s, const struct conn *c)
{
    uint32_t n = 0;
    if (c->pid < 0)
        return 0;
    for (const struct conn *o = s->head; o; o = o->next)
        n += o->pid == c->pid && o->uid == c->uid && !o->has_session;
    return n;
}

static void on_connection(uv_stream_t *l, int status)
{
    struct server *s = l->data;
    if (status < 0) {
        /* EMFILE, ENFILE, ENOMEM...: libuv has already accepted and closed what waited. */
        char why[128];
        snprintf(why, sizeof why, "accept failed: %s", uv_strerror(status));
        note_refusal(s, why);
        return;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        note_refusal(s, "out of memory");
        return;
    }
    c->s = s;
    int rc = s->is_tcp ? uv_tcp_init(s->loop, &c->h.tcp) : uv_pipe_init(s->loop, &c->h.pipe, 0);
    if (rc) {
        free(c);
        note_refusal(s, uv_strerror(rc));
        return;
    }
    c->h.handle.data = c;
    if ((rc = uv_accept(l, &c->h.stream)) != 0 || s->n_conns >= s->max_conns || s->closed) {
        char why[128];
        snprintf(why, sizeof why, rc ? "accept failed: %s" : "%s", rc ? uv_strerror(rc)
                 : "at the connection limit (--max-connections)");
        note_refusal(s, why);
        uv_close(&c->h.handle, on_refused_closed);
        return;
    }
    peer_creds(c);
    /* one process may not take every slot (connections that never say Hello included) */
    const uint32_t held = s->per_client ? conns_of(s, c) : 0;
    if (s->per_client && held >= s->per_client) {
        char why[192];
        snprintf(why, sizeof why, "process %lld (uid %lld) holds %u connections without a "
                 "session, its limit ([limits] connections)", (long long)c->pid,
                 (long long)c->uid, held);
        note_refusal(s, why);
        uv_close(&c->h.handle, on_refused_closed);
        return;
    }
    c->in = malloc(CONN_BUF_MIN);
    if (!c->in) {
        note_refusal(s, "out of memory");
        uv_close(&c->h.handle, on_refused_closed);
        return;
    }
    c->in_cap = CONN_BUF_MIN;
    c->id = s->next_id++;
    memcpy(c->rid, &c->id, SERVER_RID_LEN);
    c->deadline_ns = uv_hrtime() + (uint64_t)SERVER_HANDSHAKE_MS * 1000000u;
    c->state = C_GREETING;
    size_t b = bucket_of(c->id);
    c->hash_next = s->bucket[b];
    s->bucket[b] = c;
    c->next = s->head;
    if (s->head)
        s->head->prev = c;
    s->head = c;
    s->n_conns++;
    if (s->is_tcp) {
        (void)uv_tcp_nodelay(&c->h.tcp, 1);
        (void)uv_tcp_keepalive(&c->h.tcp, 1, 10);
    }
    if ((rc = conn_write(c, hello_bytes, sizeof hello_bytes, NULL, 0)) != 0) {
        conn_end(c, 0, 0, "cannot send the greeting: %s", uv_strerror(rc));
        return;
    }
    if ((rc = uv_read_start(&c->h.stream, on_alloc, on_read)) != 0)
        conn_end(c, 0, 0, "cannot read: %s", uv_strerror(rc));
}

static void on_sweep(uv_timer_t *t)
{
    struct server *s = t->data;
    uint64_t now = uv_hrtime();
    for (struct conn *c = s->head; c; c = c->next) {
        if ((c->state == C_GREETING || c->state == C_READY) && now > c->deadline_ns)
            conn_end(c, 0, 1, "no ZMTP handshake within %d ms", SERVER_HANDSHAKE_MS);
        else if (c->state == C_CLOSING && now > c->deadline_ns && !uv_is_closing(&c->h.handle)) {
            /* a graceful close whose peer has not read what was queued (on_shutdown is
             * then called with UV_ECANCELED and leaves the close to this) */
            log_debug("connection %" PRIu64 ": the peer did not read its last replies within "
                      "%d ms; closing", c->id, SERVER_CLOSE_MS);
            uv_close(&c->h.handle, on_conn_closed);
        }
    }
}

/* ---- binding ------------------------------------------------------------------------------- */

/* A bound, listening unix socket at sa (alen bytes of it) in *ret_fd; -errno on failure. */
static int listen_unix(const struct sockaddr_un *sa, socklen_t alen, int *ret_fd)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (const struct sockaddr *)sa, alen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    *ret_fd = fd;
    return 0;
}

/* An ipc:// endpoint: a bound, listening unix socket. -errno on failure.
 * A socket file appears at bind(2), before listen(2); a client that connects in between is
 * refused, and libdash takes a refused socket for a dead daemon's (dash_reach.c). So a path
 * is bound under a temporary name beside it (same directory, same file system), listened on,
 * and only then renamed into place: the file at the path is always a listening socket. An
 * abstract name (no file) and a path too long for the temporary name are bound in place. */
static int bind_ipc(const char *name, int *ret_fd)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, name, n);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (name[0] == '@') {
        sa.sun_path[0] = '\0'; /* abstract: the name is the bytes after the '@', no NUL */
        return listen_unix(&sa, alen, ret_fd);
    }
    struct sockaddr_un tmp = {.sun_family = AF_UNIX};
    int tn = snprintf(tmp.sun_path, sizeof tmp.sun_path, "%s.%ld.new", name, (long)getpid());
    if (tn < 0 || (size_t)tn >= sizeof tmp.sun_path)
        return listen_unix(&sa, alen + 1, ret_fd);
    (void)unlink(tmp.sun_path); /* a leftover of a killed daemon of this pid */
    int rc = listen_unix(&tmp, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)tn + 1), ret_fd);
    if (rc)
        return rc;
    /* never over a file that is there (bind(2) in place would say EADDRINUSE) */
    if (renameat2(AT_FDCWD, tmp.sun_path, AT_FDCWD, name, RENAME_NOREPLACE) != 0) {
        rc = errno == EEXIST ? -EADDRINUSE : -errno;
        (void)unlink(tmp.sun_path);
        close(*ret_fd);
        *ret_fd = -1;
        if (rc == -EINVAL) /* a file system without RENAME_NOREPLACE: bind in place */
            return listen_unix(&sa, alen + 1, ret_fd);
    }
    return rc;
}

/* tcp://HOST:PORT, HOST an IPv4 address, [IPv6] or *. */
static int parse_tcp(const char *hp, struct sockaddr_storage *ret_sa)
{
    char host[64];
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof host)
        return UV_EINVAL;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 0 || port > 65535)
        return UV_EINVAL;
    if (strcmp(host, "*") == 0)
        return uv_ip4_addr("0.0.0.0", (int)port, (struct sockaddr_in *)ret_sa);
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        return uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)ret_sa);
    }
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ret_sa);
}

static void on_listener_failed(uv_handle_t *h)
{
    free(h->data);
}

struct server *server_new(uv_loop_t *loop, const struct server_config *cfg, char *err,
                          size_t errlen)
{
    struct server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->on_msg = cfg->on_msg;
    s->on_gone = cfg->on_gone;
    s->ctx = cfg->ctx;
    s->max_conns = cfg->max_connections ? cfg->max_connections : SERVER_DEFAULT_CONNECTIONS;
    s->per_client = cfg->client_connections;
    s->reply_bytes = cfg->reply_bytes;
    s->next_id = 1;
    const char *ep = cfg->endpoint;
    int rc;
    if (strncmp(ep, "ipc://", 6) == 0) {
        int fd = -1;
        if ((rc = bind_ipc(ep + 6, &fd)) != 0) {
            snprintf(err, errlen, "cannot bind %s: %s%s", ep, strerror(-rc),
                     rc == -EADDRINUSE ? " (a file or another process holds that path)" : "");
            goto free_s;
        }
        if ((rc = uv_pipe_init(loop, &s->listener.pipe, 0)) != 0) {
            close(fd);
            snprintf(err, errlen, "cannot listen on %s: %s", ep, uv_strerror(rc));
            goto free_s;
        }
        s->listener.handle.data = s;
        if ((rc = uv_pipe_open(&s->listener.pipe, fd)) != 0) {
            close(fd);
            snprintf(err, errlen, "cannot listen on %s: %s", ep, uv_strerror(rc));
            goto close_listener;
        }
    } else if (strncmp(ep, "tcp://", 6) == 0) {
        struct sockaddr_storage sa;
        if (parse_tcp(ep + 6, &sa) != 0) {
            snprintf(err, errlen, "cannot bind %s: expected tcp://ADDRESS:PORT (ADDRESS an IPv4 "
                     "address, [IPv6] or *)", ep);
            goto free_s;
        }
        s->is_tcp = 1;
        if ((rc = uv_tcp_init(loop, &s->listener.tcp)) != 0) {
            snprintf(err, errlen, "cannot listen on %s: %s", ep, uv_strerror(rc));
            goto free_s;
        }
        s->listener.handle.data = s;
        if ((rc = uv_tcp_bind(&s->listener.tcp, (struct sockaddr *)&sa, 0)) != 0) {
            snprintf(err, errlen, "cannot bind %s: %s", ep, uv_strerror(rc));
            goto close_listener;
        }
    } else {
        snprintf(err, errlen, "cannot bind %s: dashd serves ipc:// and tcp:// endpoints", ep);
        goto free_s;
    }
    if ((rc = uv_listen(&s->listener.stream, LISTEN_BACKLOG, on_connection)) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", ep, uv_strerror(rc));
        goto close_listener;
    }
    uv_timer_init(loop, &s->sweep);
    s->sweep.data = s;
    uv_timer_start(&s->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    return s;

close_listener:
    /* The handle is the loop's until its close callback, which frees s: the caller runs
     * the loop before closing it. */
    uv_close(&s->listener.handle, on_listener_failed);
    return NULL;
free_s:
    free(s);
    return NULL;
}

int server_send(struct server *s, const void *rid, size_t rid_len, const void *data, size_t len)
{
    if (s->closed)
        return -ENOTCONN;
    struct conn *c = find(s, rid, rid_len);
    if (!c || c->state != C_OPEN)
        return -EHOSTUNREACH;
    if (uv_stream_get_write_queue_size(&c->h.stream) > SERVER_WQ_DROP)
        return -EAGAIN;
    int rc = conn_write_frame(c, 0, data, len);
    if (rc) {
        conn_end(c, 0, 0, "write failed: %s", uv_strerror(rc));
        return -EHOSTUNREACH;
    }
    if (!c->paused && should_pause(c)) {
        c->paused = 1;
        (void)uv_read_stop(&c->h.stream);
    }
    return 0;
}

void server_set_reply_bytes(struct server *s, uint64_t bytes)
{
    s->reply_bytes = bytes;
}

void server_set_client_connections(struct server *s, uint32_t n)
{
    s->per_client = n;
}

void server_set_session(struct server *s, const void *rid, size_t rid_len, int has)
{
    struct conn *c = find(s, rid, rid_len);
    if (c)
        c->has_session = has != 0;
}

uint64_t server_reply_bytes_queued(const struct server *s)
{
    return s->wq_total;
}

static void on_linger(uv_timer_t *t)
{
    struct server *s = t->data;
    for (struct conn *c = s->head; c; c = c->next)
        if (!uv_is_closing(&c->h.handle))
            uv_close(&c->h.handle, on_conn_closed);
    uv_close((uv_handle_t *)t, NULL);
}

void server_close(struct server *s, int linger_ms)
{
    if (s->closed)
        return;
    s->closed = 1;
    uv_close(&s->listener.handle, NULL);
    uv_close((uv_handle_t *)&s->sweep, NULL);
    for (struct conn *c = s->head; c; c = c->next)
        conn_end(c, 1, 0, NULL);
    if (s->head) {
        uv_timer_init(s->loop, &s->linger);
        s->linger.data = s;
        uv_timer_start(&s->linger, on_linger, (uint64_t)(linger_ms > 0 ? linger_ms : 0), 0);
        s->linger_started = 1;
    }
}

void server_free(struct server *s)
{
    free(s);
}
