// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_ping.c - `dashctl ping`: N round trips to dashd, each printed as it comes back, then
 * one summary line. Pings need no session, so this works against a daemon whatever its
 * sessions are doing (it answers Ping from its event loop even during a long backward).
 */
#include "client/dashctl/ctl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PING_COUNT_DEFAULT 4
#define PING_COUNT_MAX 1000000

static const char usage_text[] =
    "usage: dashctl ping [options]\n"
    "\n"
    "Send Ping requests to dashd one after the other and print each round trip, then\n"
    "the minimum, median and maximum.\n"
    "\n"
    "  --count N        pings to send (default 4)\n"
    "  --timeout MS     wait at most MS milliseconds for each reply, and for the daemon\n"
    "                   to answer at all (default 2000)\n"
    "  --endpoint E     the daemon's ZeroMQ endpoint (default: $DASHD_ENDPOINT, else\n"
    "                   ipc://$XDG_RUNTIME_DIR/dashd.sock, else\n"
    "                   ipc:///tmp/dashd-<uid>/dashd.sock; refused when another user\n"
    "                   could have put its socket there: docs/libdash.md)\n"
    "  -h, --help       this text\n"
    "\n"
    "Exit status: 0 every ping answered, 1 a ping lost or no daemon, 2 bad option or value.\n";

enum { OPT_COUNT = 256, OPT_TIMEOUT, OPT_ENDPOINT };

static const struct option long_opts[] = {
    {"count", required_argument, NULL, OPT_COUNT},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int ctl_ping(int argc, char **argv)
{
    int count = PING_COUNT_DEFAULT, timeout_ms = CTL_TIMEOUT_MS_DEFAULT, help = 0, rc = 0, opt;
    const char *endpoint_arg = NULL;
    char endpoint[CTL_ENDPOINT_MAX];

    opterr = 0;
    optind = 0;
    while (rc == 0 && (opt = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_COUNT:
            rc = ctl__parse_int("ping", "count", optarg, 1, PING_COUNT_MAX, &count);
            break;
        case OPT_TIMEOUT:
            rc = ctl__parse_int("ping", "timeout", optarg, 1, CTL_TIMEOUT_MS_MAX, &timeout_ms);
            break;
        case OPT_ENDPOINT:
            endpoint_arg = optarg;
            break;
        case 'h':
            help = 1;
            break;
        default:
            rc = ctl__getopt_error("ping", opt, argc, argv, OPT_COUNT);
            break;
        }
    }
    if ((rc = ctl__after_options("ping", rc, help, usage_text, argc, argv, endpoint_arg,
                                 endpoint, sizeof endpoint)) >= 0)
        return rc;

    uint64_t *rtts = malloc(sizeof *rtts * (size_t)count);
    if (!rtts) {
        fprintf(stderr, "dashctl ping: %s\n", dash_strerror(DASH_ENOMEM));
        return CTL_EXIT_FAIL;
    }
    struct dash_client *c;
    if ((rc = ctl__connect(endpoint, timeout_ms, &c)) != 0) {
        free(rtts);
        return ctl__connect_failed("ping", endpoint, timeout_ms, rc);
    }

    printf("PING dashd at %s\n", endpoint);
    int got = 0;
    for (int i = 1; i <= count; i++) {
        uint64_t rtt;
        rc = dash_ping(c, timeout_ms, &rtt);
        if (rc == 0) {
            rtts[got++] = rtt;
            printf("seq %d: %llu us\n", i, (unsigned long long)rtt);
        } else {
            printf("seq %d: %s\n", i, rc == DASH_ETIMEDOUT ? "no reply" : dash_strerror(rc));
        }
        fflush(stdout); /* one line per ping as it happens, also into a pipe */
    }
    dash_close(c);

    printf("%d sent, %d answered", count, got);
    if (got) {
        qsort(rtts, (size_t)got, sizeof *rtts, cmp_u64);
        /* the median of an even count is the mean of the middle two, rounded down */
        uint64_t med = got % 2 ? rtts[got / 2] : (rtts[got / 2 - 1] + rtts[got / 2]) / 2;
        printf("; rtt min/median/max = %llu/%llu/%llu us", (unsigned long long)rtts[0],
               (unsigned long long)med, (unsigned long long)rtts[got - 1]);
    }
    printf("\n");
    free(rtts);
    return got == count ? CTL_EXIT_OK : CTL_EXIT_FAIL;
}
