// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_status.c - `dashctl status`: is dashd up, and how is it doing, in one paragraph.
 *
 * One Ping (its round trip is part of the answer) and one Stats. "Not running" is the
 * answer, not a usage problem: it goes to stdout like any other status, with exit 1, so
 * `dashctl status` can be read by a person and tested by a script alike.
 */
#include "client/dashctl/ctl.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: dashctl status [options]\n"
    "\n"
    "Say in one paragraph whether dashd answers, and if so its version, backend, uptime,\n"
    "client sessions and queue depth.\n"
    "\n"
    "  --timeout MS     how long the daemon has to answer (default 2000)\n"
    "  --endpoint E     the daemon's ZeroMQ endpoint (default: $DASHD_ENDPOINT, else\n"
    "                   ipc://$XDG_RUNTIME_DIR/dashd.sock, else\n"
    "                   ipc:///tmp/dashd-<uid>/dashd.sock; refused when another user\n"
    "                   could have put its socket there: docs/libdash.md)\n"
    "  -h, --help       this text\n"
    "\n"
    "Exit status: 0 running, 1 not running, not answering or not permitted (the line says\n"
    "which), 2 bad option or value.\n";

enum { OPT_TIMEOUT = 256, OPT_ENDPOINT };

static const struct option long_opts[] = {
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int ctl_status(int argc, char **argv)
{
    int help = 0, timeout_ms = CTL_TIMEOUT_MS_DEFAULT, rc = 0, opt;
    const char *endpoint_arg = NULL;
    char endpoint[CTL_ENDPOINT_MAX];

    opterr = 0;
    optind = 0;
    while (rc == 0 && (opt = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_TIMEOUT:
            rc = ctl__parse_int("status", "timeout", optarg, 1, CTL_TIMEOUT_MS_MAX, &timeout_ms);
            break;
        case OPT_ENDPOINT:
            endpoint_arg = optarg;
            break;
        case 'h':
            help = 1;
            break;
        default:
            rc = ctl__getopt_error("status", opt, argc, argv, OPT_TIMEOUT);
            break;
        }
    }
    if ((rc = ctl__after_options("status", rc, help, usage_text, argc, argv, endpoint_arg,
                                 endpoint, sizeof endpoint)) >= 0)
        return rc;

    struct dash_client *c;
    if ((rc = ctl__connect(endpoint, timeout_ms, &c)) != 0) {
        /* The answer, not a usage problem: on stdout. Only a socket where something accepts
         * connections is waited on; a missing or dead one is told at once. */
        if (rc == DASH_ENOENT || rc == DASH_ECONNREFUSED)
            printf("dashd is not running: %s\n", ctl__connect_why());
        else if (rc == DASH_ETIMEDOUT)
            printf("dashd is not answering: %s\n", ctl__connect_why());
        else if (rc == DASH_EACCES)
            printf("dashd cannot be reached: %s\n", ctl__connect_why());
        else
            return ctl__connect_failed("status", endpoint, timeout_ms, rc);
        return CTL_EXIT_FAIL;
    }
    uint64_t rtt = 0;
    struct dash_stats *s = NULL;
    if ((rc = dash_ping(c, timeout_ms, &rtt)) == 0)
        rc = dash_stats(c, &s);
    dash_close(c);
    if (rc) {
        printf("dashd at %s answered, then failed: %s\n", endpoint, dash_strerror(rc));
        return CTL_EXIT_FAIL;
    }

    char up[64], ver[64], be[32];
    ctl__duration(up, sizeof up, s->uptime_ms);
    ctl__text(ver, sizeof ver, *s->server_version ? s->server_version : "unknown", 32);
    ctl__text(be, sizeof be, *s->backend ? s->backend : "unknown", 16);
    size_t in_flight = 0;
    for (size_t i = 0; i < s->n_clients; i++)
        in_flight += s->clients[i].in_flight;
    printf("dashd is running at %s: version %s, backend %s, up %s; %u client session%s with "
           "%zu request%s in flight, queue %u of %u; %llu requests answered (of every kind, "
           "dashctl's own included), %llu failed; "
           "ping %llu us.\n",
           endpoint, ver, be, up, s->sessions, s->sessions == 1 ? "" : "s", in_flight,
           in_flight == 1 ? "" : "s", s->queue_depth, s->queue_capacity,
           (unsigned long long)s->requests, (unsigned long long)s->errors,
           (unsigned long long)rtt);
    dash_stats_free(s);
    return CTL_EXIT_OK;
}
