// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_connect.c - a client's life: dash_connect (the socket, the Hello and the peer
 * checks), dash_close (Unregister and Goodbye on the way out, also in a forked child), and
 * the two calls that need no session: ping and stats.
 */
#include "client/dash_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>

int dash_default_endpoint(char *buf, size_t len)
{
    if (!buf || !len)
        return DASH_EINVAL;
    return wire_client_endpoint(buf, len);
}

static int req_done(struct dash_client *c, const void *arg)
{
    (void)c;
    return ((const struct dash__req *)arg)->state == DASH__DONE;
}

static int hello_settled(struct dash_client *c, const void *arg)
{
    (void)arg;
    return c->state == DASH__S_OK || c->state == DASH__S_LOST;
}

static uint64_t random_u64(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint64_t)dash__now_us() ^ ((uint64_t)getpid() << 40);
    return v;
}

/* Free c and what it holds. Talks to the daemon only when say_goodbye. */
static void client_free(struct dash_client *c, int say_goodbye)
{
    int same_process = c->pid == getpid();
    if (c->sock && same_process) {
        int linger = 0;
        /* Signal-ordered ops still in flight: their answers first (the daemon writes
         * their done words), then what is left is released here. */
        if (say_goodbye && c->signals)
            (void)dash__signals_settle(c);
        if (say_goodbye && c->state == DASH__S_OK) {
            for (struct dash_buffer *b = c->bufs; b; b = b->next)
                if (b->reg == DASH__REG_OK)
                    dash__unregister_detached(c, b->id);
            /* end the session now rather than at the daemon's idle timeout */
            struct dash__req *bye = dash__req_new(c, DASH__GOODBYE);
            if (bye) {
                bye->detached = 1;
                if (dash__send(c, bye) != 0)
                    dash__req_free(c, bye);
            }
            linger = c->timeout_ms < 1000 ? c->timeout_ms : 1000;
        }
        /* with LINGER, zmq_ctx_term() gives the Unregisters that long to get out */
        (void)zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
        if (c->monitor)
            (void)zmq_socket_monitor(c->sock, NULL, 0);
        zmq_close(c->sock);
    }
    if (c->monitor && same_process)
        zmq_close(c->monitor);
    if (c->zctx && same_process)
        zmq_ctx_term(c->zctx); /* in a forked child the context is not ours to end */
    while (c->reqs)
        dash__req_free(c, c->reqs);
    if (c->events)
        dash__events_destroy(c, !same_process);
    if (c->signals)
        dash__signals_destroy(c, !same_process);
    while (c->bufs)
        dash__buffer_destroy(c, c->bufs, same_process);
    dash__map_free(&c->by_wire);
    dash__map_free(&c->by_ticket);
    free(c->endpoint);
    free(c->name);
    free(c->run_tag);
    free(c);
}

static int open_socket(struct dash_client *c)
{
    int64_t maxmsg = WIRE_MAX_MESSAGE;
    /* Every reply answers a request of ours, so what can pile up here is bounded by what we
     * sent: no receive limit, so the daemon never finds us "full" (and drops a reply) while
     * the caller is busy elsewhere and not reading. */
    int linger = 0, ivl = 100, sndtimeo = c->timeout_ms, rcvhwm = 0;

    if (!(c->zctx = zmq_ctx_new()))
        return dash__zmq_code(zmq_errno());
    if (!(c->sock = zmq_socket(c->zctx, ZMQ_DEALER)))
        return dash__zmq_code(zmq_errno());
    if (zmq_setsockopt(c->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm) != 0)
        return dash__zmq_code(zmq_errno());
    /* Disconnects, for dash__notice_disconnect(); the context is this client's, so the name is
     * free. A client without a session sends nothing that a new peer must not see. */
    if (c->check_peer && !(c->flags & DASH_CONNECT_NO_SESSION)) {
        if (zmq_socket_monitor(c->sock, "inproc://dash-monitor", ZMQ_EVENT_DISCONNECTED) != 0)
            return dash__zmq_code(zmq_errno());
        if (!(c->monitor = zmq_socket(c->zctx, ZMQ_PAIR)) ||
            zmq_setsockopt(c->monitor, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
            zmq_connect(c->monitor, "inproc://dash-monitor") != 0)
            return dash__zmq_code(zmq_errno());
    }
    if (zmq_connect(c->sock, c->endpoint) != 0) {
        int e = zmq_errno();
        /* a malformed endpoint or an unknown transport is the caller's mistake */
        return e == EINVAL || e == EPROTONOSUPPORT || e == ENOCOMPATPROTO ? DASH_EINVAL
                                                                          : dash__zmq_code(e);
    }
    return 0;
}

/* dash_connect(), and on failure why it was refused (when why is not NULL). */
/* Not an endpoint at all (DASHD_ENDPOINT=gpu0.sock): DASH_EINVAL, saying what one looks
 * like; else 0. */
static int endpoint_form(const char *endpoint, char *why, size_t len)
{
    if (strstr(endpoint, "://"))
        return 0;
    if (why && len)
        snprintf(why, len, "cannot connect to dashd at %s: not an endpoint (ipc://PATH, "
                 "ipc://@NAME or tcp://HOST:PORT)", endpoint);
    return DASH_EINVAL;
}

static int client_connect(const char *endpoint, const struct dash_connect_opts *opts,
                          struct dash_client **ret_client, char *why, size_t why_len)
{
    static const struct dash_connect_opts defaults;
    char ep[512];
    int rc;

    if (!ret_client)
        return DASH_EINVAL;
    if (!opts)
        opts = &defaults;
    if (opts->timeout_ms < 0 ||
        (opts->flags & ~(DASH_CONNECT_NO_SESSION | DASH_CONNECT_STREAM_EVENTS)) ||
        (opts->client_name && strlen(opts->client_name) > DASH__NAME_MAX) ||
        (opts->run_tag && strlen(opts->run_tag) > DASH__NAME_MAX) ||
        (opts->world_size ? opts->rank >= opts->world_size : opts->rank != 0))
        return DASH_EINVAL;
    if (!endpoint) {
        if ((rc = wire_client_endpoint(ep, sizeof ep)) != 0)
            return rc;
        endpoint = ep;
    }
    if (!*endpoint)
        return DASH_EINVAL;

    struct dash_client *c = calloc(1, sizeof *c);
    if (!c)
        return DASH_ENOMEM;
    c->pid = getpid();
    c->timeout_ms = opts->timeout_ms ? opts->timeout_ms : DASH__DEFAULT_TIMEOUT_MS;
    c->audit_step = -1;
    c->flags = opts->flags;
    c->rank = opts->rank;
    c->world_size = opts->world_size;
    c->state = DASH__S_LOST;
    c->next_wire = 1;
    c->next_ticket = 1;
    c->ping_seed = random_u64();
    const char *name = opts->client_name ? opts->client_name : program_invocation_short_name;
    c->endpoint = strdup(endpoint);
    c->name = strndup(name ? name : "", DASH__NAME_MAX);
    c->run_tag = opts->run_tag ? strdup(opts->run_tag) : NULL;
    if (!c->endpoint || !c->name || (opts->run_tag && !c->run_tag)) {
        rc = DASH_ENOMEM;
        goto free_client;
    }
    if ((rc = endpoint_form(c->endpoint, c->last_error, sizeof c->last_error)) != 0)
        goto free_client;
    /* Before anything is sent: whose socket is this? */
    if ((rc = wire_endpoint_check(c->endpoint, &c->owner, c->refusal, sizeof c->refusal)) != 0) {
        if (rc == DASH_EACCES) /* a directory we may not enter: say whose, and its mode */
            (void)dash__reach(c->endpoint, c->last_error, sizeof c->last_error);
        goto free_client;
    }
    /* Is anything there to wait for? Missing, dead and forbidden sockets fail now. */
    if ((rc = dash__reach(c->endpoint, c->last_error, sizeof c->last_error)) != 0)
        goto free_client;
    c->check_peer = wire_ipc_path(c->endpoint) != NULL;
    if ((rc = open_socket(c)) != 0)
        goto free_client;

    int64_t now = dash__now_ms();
    if (c->flags & DASH_CONNECT_NO_SESSION) {
        /* No Hello, but a round trip: connecting must still find out whether anyone is
         * there. */
        c->state = DASH__S_OK;
        struct dash__req *r = dash__req_new(c, DASH__PING);
        if (!r) {
            rc = DASH_ENOMEM;
            goto free_client;
        }
        r->token = c->ping_seed;
        if ((rc = dash__send(c, r)) == 0 && (rc = dash__wait(c, req_done, r, -1, now)) == 0)
            rc = r->code;
        dash__req_free(c, r);
    } else {
        if ((rc = dash__start_hello(c)) == 0 &&
            (rc = dash__wait(c, hello_settled, NULL, -1, now)) == 0)
            rc = c->state == DASH__S_OK ? 0 : c->hello_code;
    }
    if (rc)
        goto free_client;
    *ret_client = c;
    return 0;

free_client:
    if (why && why_len) {
        if (rc == DASH_EPERM && c->refusal[0])
            snprintf(why, why_len, "%s", c->refusal);
        else if (rc == DASH_ETIMEDOUT && wire_ipc_path(c->endpoint))
            snprintf(why, why_len, "no answer from dashd at %s within %d ms (something accepts "
                     "connections on it: a dashd that is stopped, stuck or still starting?)",
                     c->endpoint, c->timeout_ms);
        else if (rc == DASH_ETIMEDOUT) /* tcp: a firewall may swallow what we send */
            snprintf(why, why_len, "no answer from dashd at %s within %d ms (no dashd there, "
                     "a firewall dropping the connection, or a dashd that is stopped, stuck or "
                     "still starting?)", c->endpoint, c->timeout_ms);
        else if (c->last_error[0])
            snprintf(why, why_len, "%s", c->last_error);
        else if (c->refusal[0])
            snprintf(why, why_len, "cannot connect to dashd at %s: %s", c->endpoint, c->refusal);
        else
            snprintf(why, why_len, "cannot connect to dashd at %s: %s", c->endpoint,
                     dash_strerror(rc));
    }
    client_free(c, 0);
    return rc;
}

int dash_connect(const char *endpoint, const struct dash_connect_opts *opts,
                 struct dash_client **ret_client)
{
    return client_connect(endpoint, opts, ret_client, NULL, 0);
}

int dash_connect_explain(const char *endpoint, const struct dash_connect_opts *opts,
                         struct dash_client **ret_client, char *why, size_t len)
{
    if (!why && len)
        return DASH_EINVAL;
    if (why && len)
        why[0] = '\0';
    int rc = client_connect(endpoint, opts, ret_client, why, len);
    if (rc && why && len && !why[0]) /* failed before there was a client to say why */
        snprintf(why, len, "cannot connect to dashd at %s: %s",
                 endpoint ? endpoint : "the default endpoint", dash_strerror(rc));
    return rc;
}

int dash_endpoint_check(const char *endpoint, char *why, size_t len)
{
    char ep[512];
    int64_t owner;
    int rc;

    if ((!why && len) || (endpoint && !*endpoint))
        return DASH_EINVAL;
    if (why && len)
        why[0] = '\0';
    if (!endpoint) {
        if ((rc = wire_client_endpoint(ep, sizeof ep)) != 0)
            return rc;
        endpoint = ep;
    }
    if ((rc = endpoint_form(endpoint, why, len)) != 0 ||
        (rc = wire_endpoint_check(endpoint, &owner, why, len)) != 0 || !wire_ipc_path(endpoint))
        return rc;
    /* The file passes: ask whoever answers there, as dash_connect() would, without a
     * session (nothing but a Ping is sent). */
    struct dash_connect_opts o = {.client_name = "dash_endpoint_check",
                                  .timeout_ms = DASH__CHECK_TIMEOUT_MS,
                                  .flags = DASH_CONNECT_NO_SESSION};
    struct dash_client *c;
    rc = client_connect(endpoint, &o, &c, why, len);
    if (rc == 0)
        dash_close(c);
    if (rc == DASH_EPERM)
        return rc;
    if (why && len)
        why[0] = '\0'; /* silence, or any other failure, refuses nothing */
    return 0;
}

void dash_close(struct dash_client *c)
{
    if (c)
        client_free(c, 1);
}

/* ---- ping and stats ------------------------------------------------------------------- */

int dash_ping(struct dash_client *c, int timeout_ms, uint64_t *ret_rtt_us)
{
    if (!c || timeout_ms < -1)
        return DASH_EINVAL;
    struct dash__req *r = dash__req_new(c, DASH__PING);
    if (!r)
        return DASH_ENOMEM;
    int64_t now = dash__now_ms();
    int64_t deadline = now + (timeout_ms < 0 ? c->timeout_ms : timeout_ms);
    r->token = c->ping_seed + c->next_wire; /* differs for every ping of c */
    int rc = dash__send(c, r);
    if (rc)
        (void)dash__fail(c, rc, "cannot send a ping to dashd at %s: %s", c->endpoint,
                         dash_strerror(rc));
    else if ((rc = dash__wait(c, req_done, r, deadline, now)) == 0 && (rc = r->code) != 0)
        (void)dash__fail(c, rc, "dashd at %s answered the ping with %s", c->endpoint,
                         dash_strerror(rc));
    uint64_t rtt = r->rtt_us;
    dash__req_free(c, r);
    if (rc == 0 && ret_rtt_us)
        *ret_rtt_us = rtt;
    return rc;
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

void dash_stats_free(struct dash_stats *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_clients; i++) {
        free((char *)s->clients[i].client_name);
        free((char *)s->clients[i].run_tag);
    }
    free(s->clients);
    free((char *)s->server_version);
    free((char *)s->backend);
    free((char *)s->audit_path);
    free((char *)s->audit_level);
    free((char *)s->gpu_sharing);
    free(s);
}

static struct dash_stats *stats_convert(const Dash__StatsReply *m, uint64_t own_session)
{
    struct dash_stats *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->server_version = strdup(str_or_empty(m->server_version));
    s->backend = strdup(str_or_empty(m->backend));
    s->uptime_ms = m->uptime_ms;
    s->queue_depth = m->queue_depth;
    s->queue_capacity = m->queue_capacity;
    s->requests = m->requests;
    s->errors = m->errors;
    s->threads = m->threads;
    s->own_session_id = own_session;
    s->sessions = m->has_sessions ? m->sessions : (uint32_t)m->n_clients;
    s->audit_path = strdup(str_or_empty(m->audit_path));
    s->audit_level = strdup(str_or_empty(m->audit_level));
    s->audit_written = m->audit_written;
    s->audit_dropped = m->audit_dropped;
    s->audit_write_errors = m->audit_write_errors;
    s->gpu_sharing = strdup(str_or_empty(m->gpu_sharing));
    if (!s->server_version || !s->backend || !s->audit_path || !s->audit_level || !s->gpu_sharing)
        goto fail;
    if (m->n_clients) {
        if (!(s->clients = calloc(m->n_clients, sizeof *s->clients)))
            goto fail;
    }
    for (size_t i = 0; i < m->n_clients; i++) {
        const Dash__ClientStats *in = m->clients[i];
        struct dash_client_stats *out = &s->clients[i];
        s->n_clients = i + 1; /* so a failure below frees what is filled */
        out->session_id = in->session_id;
        out->pid = in->pid;
        out->requests = in->requests;
        out->errors = in->errors;
        out->forwards = in->forwards;
        out->backwards = in->backwards;
        out->bytes_registered = in->bytes_registered;
        out->buffers = in->buffers;
        out->latency_p50_us = in->latency_p50_us;
        out->latency_p99_us = in->latency_p99_us;
        out->in_flight = in->in_flight;
        if (in->has_world_size && in->has_rank) {
            out->rank = in->rank;
            out->world_size = in->world_size;
        }
        out->client_name = strdup(str_or_empty(in->client_name));
        out->run_tag = strdup(str_or_empty(in->run_tag));
        if (!out->client_name || !out->run_tag)
            goto fail;
    }
    return s;

fail:
    dash_stats_free(s);
    return NULL;
}

int dash_stats(struct dash_client *c, struct dash_stats **ret_stats)
{
    if (!c || !ret_stats)
        return DASH_EINVAL;
    struct dash__req *r = dash__req_new(c, DASH__STATS);
    if (!r)
        return DASH_ENOMEM;
    int64_t now = dash__now_ms();
    int rc = dash__send(c, r);
    if (rc)
        (void)dash__fail(c, rc, "cannot send a stats request to dashd at %s: %s", c->endpoint,
                         dash_strerror(rc));
    else if ((rc = dash__wait(c, req_done, r, -1, now)) == 0 && (rc = r->code) != 0)
        (void)dash__fail(c, rc, "dashd at %s answered the stats request with %s", c->endpoint,
                         dash_strerror(rc));
    struct dash_stats *s = NULL;
    if (rc == 0 && !(s = stats_convert(r->reply->stats, c->session_id)))
        rc = DASH_ENOMEM;
    dash__req_free(c, r);
    if (rc == 0)
        *ret_stats = s;
    return rc;
}
