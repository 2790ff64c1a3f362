// SPDX-License-Identifier: BSD-3-Clause
/*
 * config.h - dashd's settings: one table of options, set from the command line and from
 * an INI config file (parsed by inih), the command line winning.
 *
 * Every option has one name, used as the long option (--audit-max-size) and as the key in
 * the file (audit-max-size, or audit_max_size). The file's keys live in two sections:
 * [dashd] for what the command line has always had, and [limits] for the per-client caps
 * (limits.h), which on the command line are --limit-NAME. docs/config.md and
 * systemd/dashd.conf.example list them all.
 *
 *   config_defaults -> config_load(FILE) -> config_set(each command-line option) -> config_check
 *
 * SIGHUP runs the same steps again into a fresh struct config; config_diff() then says
 * which options changed, and which of those can take effect while dashd runs
 * (CONFIG_LIVE: the log level, the limits, the audit file) - the rest need a restart.
 *
 * Library code: no logging, messages go back in err.
 */
#ifndef DASHD_CONFIG_H
#define DASHD_CONFIG_H

#include "audit.h"
#include "limits.h"
#include "log.h"

#include <stddef.h>
#include <stdint.h>

#define CONFIG_PATH_MAX 4096

enum config_backend { CONFIG_BACKEND_AUTO, CONFIG_BACKEND_CPU, CONFIG_BACKEND_CUDA };

struct config {
    char endpoint[256];          /* "" until config_check: the default endpoint */
    int backend;                 /* enum config_backend */
    int32_t device;
    int32_t threads;             /* 0: online CPUs */
    uint32_t queue;
    double session_timeout_s;
    int level;                   /* enum log_level */
    char audit_path[CONFIG_PATH_MAX];
    int audit_level;             /* enum audit_level */
    int audit_sync;              /* enum audit_sync */
    uint64_t audit_max_bytes;
    int32_t audit_keep;
    uint32_t max_connections;    /* 0: as many as the file descriptor limit allows */
    int32_t kernels;             /* a CUATTN_IMPL_* or BACKEND_KERNELS_AUTO */
    uint64_t reply_bytes;        /* replies waiting for slow readers, all connections */
    uint64_t op_memory;          /* one op's host memory; 0: half of what dashd may use */
    char metrics[64];            /* Prometheus endpoint ADDR:PORT; "": none */
    struct limits_config limits;
    /* Bookkeeping. */
    char config_path[CONFIG_PATH_MAX]; /* --config, or "" */
    int audit_level_set;               /* audit-level was given */
};

/* An option changed by a reload. */
struct config_change {
    const char *name;
    int live; /* takes effect without a restart */
};

#define CONFIG_MAX_CHANGES 64

void config_defaults(struct config *c);

/* Set option `name` (a long option name without the dashes; '_' reads as '-') from
 * its text. 0, or -1 with the reason in err ("--queue needs an integer in 1..1000000, not
 * 'x'", "unknown option"). */
int config_set(struct config *c, const char *name, const char *value, char *err, size_t errlen);

/* Read an INI file: [dashd] keys are option names, [limits] keys the limit names. 0, or
 * -1 with the reason (file and line) in err. Keys absent from the file keep their value. */
int config_load(struct config *c, const char *path, char *err, size_t errlen);

/* Cross-checks and derived values once everything is set (the default endpoint, the ipc
 * path's length, --kernels with --backend cpu, --audit-level without --audit). 0 or -1
 * with the reason. */
int config_check(struct config *c, char *err, size_t errlen);

/* Which options differ between a and b: their count (at most max) in ret. */
size_t config_diff(const struct config *a, const struct config *b, struct config_change *ret,
                   size_t max);

/* The value of option `name` in c as text (for log lines). */
void config_format(const struct config *c, const char *name, char *buf, size_t len);

/* getopt_long's table of every option (their `val` indexes config_option_name()), plus
 * --config, --help and --version at CONFIG_OPT_CONFIG, _HELP, _VERSION; NULL-terminated,
 * static. */
#define CONFIG_OPT_CONFIG 1000
#define CONFIG_OPT_HELP 1001
#define CONFIG_OPT_VERSION 1002
const void *config_longopts(void); /* const struct option * */
const char *config_option_name(int val);

#endif
