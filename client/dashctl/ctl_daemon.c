// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_daemon.c - what the dashctl commands that talk to dashd (ping, stats, status) share:
 * option errors in the house format, the endpoint, connecting without a session, and
 * making the daemon's strings safe to print as text or JSON.
 *
 * These commands connect with DASH_CONNECT_NO_SESSION: they only send Ping and Stats, which
 * need no session, so running `dashctl stats` does not add a client to what it shows.
 */
#include "client/dashctl/ctl.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ctl__usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "dashctl %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CTL_EXIT_USAGE;
}

int ctl__getopt_error(const char *cmd, int opt, int argc, char **argv, int first_long)
{
    /* getopt leaves the offending word just before optind for both error kinds */
    const char *word = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (opt == ':')
        return ctl__usage_error(cmd, "option '%s' needs a value", word);
    /* optopt: the short option, a long option's value when it was given a value it does
     * not take, or 0 for an unknown or ambiguous long option */
    if (optopt >= first_long)
        return ctl__usage_error(cmd, "option '%s' takes no value", word);
    if (optopt > 0)
        return ctl__usage_error(cmd, "unknown option '-%c'", optopt);
    return ctl__usage_error(cmd, "unknown or ambiguous option '%s'", word);
}

int ctl__parse_int(const char *cmd, const char *opt, const char *arg, int lo, int hi, int *ret)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (end == arg || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        return ctl__usage_error(cmd, "--%s must be an integer from %d to %d, not '%s'", opt, lo,
                                hi, arg);
    *ret = (int)v;
    return 0;
}

int ctl__endpoint(const char *cmd, const char *arg, char *buf, size_t len)
{
    if (arg) {
        if (!*arg || strlen(arg) >= len)
            return ctl__usage_error(cmd, "--endpoint must be a ZeroMQ endpoint such as "
                                         "ipc:///run/dashd/dashd.sock, not '%s'", arg);
        strcpy(buf, arg);
        return 0;
    }
    int rc = dash_default_endpoint(buf, len);
    if (rc)
        return ctl__usage_error(cmd, "default endpoint: %s (set DASHD_ENDPOINT or --endpoint)",
                                dash_strerror(rc));
    return 0;
}

int ctl__after_options(const char *cmd, int rc, int help, const char *usage, int argc,
                       char **argv, const char *endpoint_arg, char *buf, size_t len)
{
    if (rc)
        return rc;
    if (help) {
        fputs(usage, stdout);
        return CTL_EXIT_OK;
    }
    if (optind < argc)
        return ctl__usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if ((rc = ctl__endpoint(cmd, endpoint_arg, buf, len)) != 0)
        return rc;
    return -1;
}

/* Why the last ctl__connect() failed (dashctl runs one command, on one thread). */
static char connect_why[1024];

int ctl__connect(const char *endpoint, int timeout_ms, struct dash_client **ret_client)
{
    struct dash_connect_opts o = {
        .client_name = "dashctl",
        .timeout_ms = timeout_ms,
        .flags = DASH_CONNECT_NO_SESSION,
    };
    return dash_connect_explain(endpoint, &o, ret_client, connect_why, sizeof connect_why);
}

const char *ctl__connect_why(void)
{
    return connect_why;
}

int ctl__connect_failed(const char *cmd, const char *endpoint, int timeout_ms, int rc)
{
    (void)timeout_ms; /* the sentence says how long it waited */
    if (rc == DASH_EINVAL)
        return ctl__usage_error(cmd, "cannot connect to '%s': not a usable ZeroMQ endpoint",
                                endpoint);
    if (rc == DASH_ENOENT || rc == DASH_ECONNREFUSED)
        fprintf(stderr, "dashctl %s: dashd is not running: %s\n", cmd, connect_why);
    else if (rc == DASH_ETIMEDOUT)
        fprintf(stderr, "dashctl %s: dashd is not answering: %s\n", cmd, connect_why);
    else /* permission denied, not trusted, ...: the sentence names it */
        fprintf(stderr, "dashctl %s: %s\n", cmd, connect_why);
    return CTL_EXIT_FAIL;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static int utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
            : s[0] >= 0xf0 && s[0] <= 0xf4                                 ? 4
                                                                            : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* overlong 3/4-byte forms, surrogates, and code points past U+10FFFF */
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

size_t ctl__text(char *dst, size_t len, const char *s, size_t max_cols)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0, cols = 0;
    if (!len)
        return 0;
    while (*p && cols < max_cols) {
        int k = utf8_len(p);
        if (n + (size_t)(k ? k : 1) + 1 > len)
            break;
        if (k > 1) {
            memcpy(dst + n, p, (size_t)k); /* one column, as most scripts take */
            n += (size_t)k;
            p += k;
        } else {
            /* control characters and stray bytes would break the table */
            dst[n++] = k == 0 || *p < 0x20 || *p == 0x7f ? '?' : (char)*p;
            p++;
        }
        cols++;
    }
    if (*p && cols > 0) {
        /* cut short: the last column says so */
        while (n > 0 && ((unsigned char)dst[n - 1] & 0xc0) == 0x80)
            n--;
        dst[n - 1] = '~';
    }
    dst[n] = '\0';
    return cols;
}

void ctl__json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (n == 0) {
            fputs("\\ufffd", stdout); /* the daemon's bytes were not UTF-8; JSON must be */
            p++;
        } else if (n > 1) {
            fwrite(p, 1, (size_t)n, stdout);
            p += n;
        } else {
            if (*p == '"' || *p == '\\')
                printf("\\%c", *p);
            else if (*p < 0x20 || *p == 0x7f)
                printf("\\u%04x", *p);
            else
                putchar(*p);
            p++;
        }
    }
    putchar('"');
}

void ctl__duration(char *dst, size_t len, uint64_t ms)
{
    uint64_t s = ms / 1000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
    if (d)
        snprintf(dst, len, "%llud %lluh %02llum", (unsigned long long)d, (unsigned long long)h,
                 (unsigned long long)m);
    else if (h)
        snprintf(dst, len, "%lluh %02llum %02llus", (unsigned long long)h,
                 (unsigned long long)m, (unsigned long long)(s % 60));
    else if (m)
        snprintf(dst, len, "%llum %02llus", (unsigned long long)m,
                 (unsigned long long)(s % 60));
    else
        snprintf(dst, len, "%llu.%03llus", (unsigned long long)s,
                 (unsigned long long)(ms % 1000));
}
