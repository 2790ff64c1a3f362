// SPDX-License-Identifier: BSD-3-Clause
/*
 * main.c - dashd's command line, start-up and shutdown.
 *
 * Threads: the main thread runs the libuv loop, which owns the listening socket, every
 * client connection (server.c speaks ZeroMQ's ZMTP to the clients' DEALER sockets), the
 * sessions and every reply; one worker thread (queue.c) runs the ops, on the engine's own
 * pool of --threads workers (CPU backend) or on the GPU (CUDA backend, --device N).
 *
 * Backends: --backend cpu is the CPU engine; cuda the CUDA kernels on --device (exit 1,
 * saying why, when that device is not usable or the build has no CUDA); auto (the default)
 * the CUDA backend when it starts, else the CPU engine, logging which and why. A build
 * without nvcc has no CUDA code at all.
 *
 * Start-up order matters for the ipc endpoint: take the lock file (unless it is another
 * user's: then go on without it), only then remove a stale socket file of ours and bind
 * (bind fails where a file exists, so a live socket is never taken over), then tell
 * systemd we are ready (notify.c) - after the backend's warm-up (warmup.c), so that the
 * first client does not pay for loading kernels.
 * Shutdown (SIGTERM/SIGINT): stop taking work, answer everything in flight, close the
 * socket (with a short linger so those answers leave), remove the socket file, then the
 * lock, exit 0. A second signal exits at once, abandoning what is in flight.
 */
#include "audit.h"
#include "backend.h"
#include "buildid.h"
#include "config.h"
#include "dispatch.h"
#include "guard.h"
#include "lockfile.h"
#include "memcap.h"
#include "log.h"
#include "metrics_http.h"
#include "notify.h"
#include "server.h"
#include "warmup.h"

#include "kernels/cpu/pool.h"
#include "proto/errors.h"
#include "proto/wire.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#define SHUTDOWN_LINGER_MS 1000
#define LOST_CHECK_MS 100 /* how often the loop looks at backend.lost */
#define EXIT_USAGE 2
/* File descriptors kept free of connections: the log, the audit file, shm objects while
 * they are mapped, the GPU driver's, libuv's own. */
#define FD_RESERVE_MIN 64
#define MAX_BUFFERS_PER_SESSION 65536

struct app {
    struct config cfg; /* what runs now */
    int argc;          /* the command line, applied again over the file on SIGHUP */
    char **argv;
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    struct audit *audit;
    struct server *srv;
    struct dispatch *disp;
    const char *sock_path; /* the ipc socket file we bound, or NULL */
    struct stat sock_st;   /* its identity once bound (st_ino 0: not bound) */
    struct lockfile *lock;
    struct notify *notify;
    struct metrics_http *metrics; /* NULL without --metrics */
    struct backend *backend;
    uv_timer_t lost_timer; /* polls backend->lost */
    int stopping;  /* dispatch_stop called: a signal, or a lost GPU context */
    int signalled; /* SIGTERM or SIGINT seen: a second one exits at once */
    int exit_status; /* main's, once the loop has stopped: 0, or DASHD_EXIT_DEVICE_LOST */
};

static int32_t online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > POOL_THREADS_MAX ? POOL_THREADS_MAX : (int32_t)n;
}

/* One op's host memory cap: --op-memory (0: unset) up to all the memory we may use, else
 * half of it (UINT64_MAX: no figure, no cap). */
static uint64_t op_memory_max(uint64_t op_memory, uint64_t mem)
{
    if (op_memory)
        return op_memory < mem ? op_memory : mem;
    return mem == UINT64_MAX ? UINT64_MAX : mem / 2;
}

static void usage(FILE *f)
{
    char ep[256];
    if (wire_default_endpoint(ep, sizeof ep) != 0)
        snprintf(ep, sizeof ep, "(none: the default path is too long)");
    struct config d;
    config_defaults(&d);
    fprintf(f,
            "Usage: dashd [OPTION]...\n"
            "Serve attention forward and backward to client processes over ZeroMQ.\n"
            "\n"
            "  --config FILE          read settings from an INI file ([dashd]: any option below\n"
            "                         by name, e.g. queue = 512; [limits]: the per-client caps,\n"
            "                         e.g. in_flight = 64); the command line wins over it.\n"
            "                         docs/config.md\n"
            "  --endpoint E           ZeroMQ endpoint to bind (default: %s)\n"
            "  --backend B            cpu, cuda or auto (default auto: CUDA when a usable GPU\n"
            "                         is there, else the CPU engine)\n"
            "  --device N             the CUDA device the cuda backend uses (default 0)\n"
            "  --kernels K            the cuda backend's kernels: auto (v3 on sm_90 GPUs, v2\n"
            "                         elsewhere), v1 (CUDA cores), v2 (mma.sync) or v3\n"
            "                         (wgmma backward, sm_90); they change the bits, and audit\n"
            "                         records say which ran (default auto)\n"
            "  --threads N            CPU engine threads, 1..%d (default: online CPUs, %d)\n"
            "  --queue N              requests queued or running before DASH_EBUSY (default %u)\n"
            "  --session-timeout S    drop a session idle for S seconds (default %g)\n"
            "  --log-level L          error, warn, info or debug (default info)\n"
            "  --audit PATH           append a record of every forward and backward to PATH\n"
            "                         (read it with dashctl audit; docs/audit.md)\n"
            "  --audit-level L        off, outputs (digests of outputs; the default with\n"
            "                         --audit) or all (inputs too)\n"
            "  --audit-sync S         when to fsync the log: none, batch (default) or every\n"
            "  --audit-max-size N     rotate the log before it passes N bytes; suffixes K, M,\n"
            "                         G (default 1G; 0: never)\n"
            "  --audit-keep N         rotated logs kept, PATH.1..PATH.N (default %d)\n"
            "  --max-connections N    client connections served at once; more are refused\n"
            "                         (default %d, or fewer if the file descriptor limit,\n"
            "                         raised to its hard limit at start, is lower)\n"
            "  --max-reply-bytes N    replies waiting for clients that do not read them, all\n"
            "                         connections together, before those stop being read\n"
            "                         (default %lluM)\n"
            "  --op-memory N          host memory one op may take: the dense copies of its\n"
            "                         shared-memory tensors and the CPU engine's working\n"
            "                         memory; beyond it DASH_ENOMEM (default 0: half of the\n"
            "                         RAM or of the cgroup's limit, whichever is lower)\n"
            "  --limit-connections N  per client (a process: the connection's uid and pid;\n"
            "  --limit-sessions N     0 for no limit): connections without a session\n"
            "  --limit-buffers N      (default %u; more are closed at accept), sessions\n"
            "  --limit-registered-bytes N  (default %u), registered buffers (default %u)\n"
            "  --limit-in-flight N    and their bytes, Forward/Backward ops accepted and\n"
            "  --limit-request-bytes N     not answered, and the tensor bytes one op names\n"
            "                         (defaults: no limit); beyond them a request gets\n"
            "                         DASH_ELIMIT. The queue serves clients in turn (round\n"
            "                         robin)\n"
            "  --metrics ADDR:PORT    serve Prometheus metrics at http://ADDR:PORT/metrics\n"
            "                         (ADDR an IPv4 address or [IPv6]; e.g. 127.0.0.1:9464;\n"
            "                         port 0 picks a free one, logged; default: off)\n"
            "  --help                 show this help and exit\n"
            "  --version              show the version and exit\n"
            "\n"
            "Runs in the foreground and logs to stderr. SIGTERM or SIGINT: answer the\n"
            "requests in flight, write their audit records, remove the socket and its lock,\n"
            "exit 0; a second SIGTERM or SIGINT exits at once, abandoning what is in flight.\n"
            "SIGHUP: read the config file again (the command line still wins) and apply the\n"
            "log level, the limits, --max-reply-bytes and --audit PATH (reopening the audit\n"
            "log, after logrotate moved it, or opening a new path); other changes are logged\n"
            "as needing a restart. Requests of a client process that has died are not started\n"
            "(on the CPU engine, stopped midway); when its session ends, the shared memory it\n"
            "registered under libdash's names (/dash-PID-...) is unlinked.\n",
            ep, POOL_THREADS_MAX, online_cpus(), d.queue, d.session_timeout_s, d.audit_keep,
            SERVER_DEFAULT_CONNECTIONS, (unsigned long long)(d.reply_bytes >> 20),
            d.limits.connections, d.limits.sessions, d.limits.buffers);
}

/* defaults, then --config FILE, then every other option of the command line, then the
 * cross-checks. Returns -1 to go on, else the exit status (0 for --help and --version,
 * EXIT_USAGE for a bad option or file). quiet: no usage text (a reload). */
static int parse_options(int argc, char **argv, struct config *o, int quiet)
{
    const struct option *longopts = config_longopts();
    char err[1024];
    int c;
    config_defaults(o);
    optind = 0; /* glibc: start afresh (a reload parses the same argv again) */
    opterr = !quiet;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == CONFIG_OPT_HELP) {
            usage(stdout);
            return 0;
        }
        if (c == CONFIG_OPT_VERSION) {
            printf("dashd " DASHD_VERSION "\n");
            return 0;
        }
        if (c == CONFIG_OPT_CONFIG) {
            if (!*optarg || strlen(optarg) >= sizeof o->config_path)
                goto bad_path;
            snprintf(o->config_path, sizeof o->config_path, "%s", optarg);
        } else if (!config_option_name(c)) {
            if (!quiet)
                usage(stderr); /* getopt_long has said what was wrong */
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dashd: unexpected argument '%s'\n", argv[optind]);
        if (!quiet)
            usage(stderr);
        return EXIT_USAGE;
    }
    if (o->config_path[0] && config_load(o, o->config_path, err, sizeof err) != 0) {
        fprintf(stderr, "dashd: %s\n", err);
        return EXIT_USAGE;
    }
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        const char *name = config_option_name(c);
        if (name && config_set(o, name, optarg, err, sizeof err) != 0) {
            fprintf(stderr, "dashd: %s\n", err);
            if (!quiet)
                usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (config_check(o, err, sizeof err) != 0) {
        fprintf(stderr, "dashd: %s\n", err);
        return EXIT_USAGE;
    }
    return -1;

bad_path:
    fprintf(stderr, "dashd: --config needs a file path\n");
    return EXIT_USAGE;
}

/* ---- shutdown ------------------------------------------------------------------------------ */

/* Remove our socket file - only ours: if it was replaced (someone removed our lock and a
 * newer daemon bound the path), the newer daemon's socket stays. */
static void remove_socket(const struct app *a)
{
    struct stat now;
    if (!a->sock_path || a->sock_st.st_ino == 0)
        return;
    if (stat(a->sock_path, &now) == 0 && now.st_ino == a->sock_st.st_ino &&
        now.st_dev == a->sock_st.st_dev)
        (void)unlink(a->sock_path);
}

static void on_idle(void *arg)
{
    struct app *a = arg;
    log_info("nothing in flight; closing");
    metrics_http_close(a->metrics);
    a->metrics = NULL;
    server_close(a->srv, SHUTDOWN_LINGER_MS);
    dispatch_close(a->disp);
    notify_close(a->notify);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sighup, NULL);
    uv_close((uv_handle_t *)&a->lost_timer, NULL);
}

/* Open the audit log of cfg, or NULL (none configured, or it failed: logged). */
static struct audit *open_audit(const struct config *cfg)
{
    if (!cfg->audit_path[0] || cfg->audit_level == AUDIT_OFF)
        return NULL;
    struct audit_config ac = {.path = cfg->audit_path,
                              .level = (enum audit_level)cfg->audit_level,
                              .sync = (enum audit_sync)cfg->audit_sync,
                              .max_bytes = cfg->audit_max_bytes,
                              .keep = cfg->audit_keep,
                              .server_version = DASHD_VERSION};
    char why[512];
    struct audit *au = NULL;
    if (audit_open(&ac, &au, why, sizeof why) != 0) {
        log_error("--audit: %s", why);
        return NULL;
    }
    return au;
}

/* SIGHUP: the config file again, the command line over it; apply what can change live,
 * say what cannot. The audit log is reopened (logrotate) or, with a new path, replaced. */
static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    struct app *a = h->data;
    struct config next;
    if (parse_options(a->argc, a->argv, &next, 1) >= 0) {
        log_error("SIGHUP: the configuration is not valid (said above); nothing changed");
        return;
    }
    if (!next.threads)
        next.threads = a->cfg.threads;
    struct config_change ch[CONFIG_MAX_CHANGES];
    size_t n = config_diff(&a->cfg, &next, ch, CONFIG_MAX_CHANGES);
    int audit_changed = 0;
    for (size_t i = 0; i < n; i++) {
        char was[256], now[256];
        config_format(&a->cfg, ch[i].name, was, sizeof was);
        config_format(&next, ch[i].name, now, sizeof now);
        if (!ch[i].live) {
            log_warn("SIGHUP: %s changed from %s to %s, which needs a restart: still %s",
                     ch[i].name, was, now, was);
            continue;
        }
        log_info("SIGHUP: %s is now %s (was %s)", ch[i].name, now, was);
        if (strcmp(ch[i].name, "audit") == 0)
            audit_changed = 1;
    }
    log_set_level((enum log_level)next.level);
    dispatch_set_limits(a->disp, &next.limits);
    server_set_reply_bytes(a->srv, next.reply_bytes);
    server_set_client_connections(a->srv, next.limits.connections);
    /* Only what is live is taken over; the rest keeps running as it started. */
    a->cfg.level = next.level;
    a->cfg.limits = next.limits;
    a->cfg.reply_bytes = next.reply_bytes;
    if (audit_changed) {
        /* what runs until the new path opens: a later SIGHUP must see the change again */
        char was_path[CONFIG_PATH_MAX];
        snprintf(was_path, sizeof was_path, "%s", a->cfg.audit_path);
        snprintf(a->cfg.audit_path, sizeof a->cfg.audit_path, "%s", next.audit_path);
        struct audit *au = open_audit(&a->cfg);
        if (!au && a->cfg.audit_path[0] && a->cfg.audit_level != AUDIT_OFF) {
            log_error("SIGHUP: keeping the audit log %s", a->audit ? audit_path(a->audit) : "(none)");
            snprintf(a->cfg.audit_path, sizeof a->cfg.audit_path, "%s", was_path);
            return;
        }
        dispatch_set_audit(a->disp, au);
        audit_close(a->audit); /* writes and syncs what it had queued */
        a->audit = au;
        log_info("SIGHUP: auditing to %s", au ? audit_path(au) : "nothing");
    } else if (a->audit) {
        audit_reopen(a->audit);
    }
    /* one line whatever happened, so `systemctl reload` always leaves its trace */
    size_t applied = 0;
    for (size_t i = 0; i < n; i++)
        applied += ch[i].live != 0;
    log_info("SIGHUP: configuration read again (%s%s): %zu setting%s changed live, %zu need%s a "
             "restart%s",
             a->cfg.config_path[0] ? "file " : "no config file, the command line only",
             a->cfg.config_path, applied, applied == 1 ? "" : "s", n - applied,
             n - applied == 1 ? "s" : "", a->audit && !audit_changed ? "; audit log reopened" : "");
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct app *a = h->data;
    if (a->signalled) {
        log_warn("%s again: exiting now, abandoning %u requests in flight", strsignal(signum),
                 dispatch_in_flight(a->disp));
        remove_socket(a);
        lockfile_release(a->lock);
        _exit(1);
    }
    a->signalled = 1;
    if (a->stopping) { /* already, for a lost GPU context: the same drain, its exit status */
        log_info("%s: already stopping; %u requests in flight to finish", strsignal(signum),
                 dispatch_in_flight(a->disp));
        return;
    }
    a->stopping = 1;
    log_info("%s: stopping; %u requests in flight to finish", strsignal(signum),
             dispatch_in_flight(a->disp));
    notify_stopping(a->notify, "stopping: %u requests in flight to finish",
                    dispatch_in_flight(a->disp));
    dispatch_stop(a->disp, on_idle, a);
}

/* The backend lost its device (backend.h: a CUDA error that leaves this process's context
 * unusable): every later op would fail, for every client, until the process exits. Stop as
 * on SIGTERM - what is in flight gets its error reply - and exit with
 * DASHD_EXIT_DEVICE_LOST, so that the service manager starts a fresh dashd (a new context;
 * Restart=on-failure in the units), which the clients find again by themselves. */
static void on_lost_check(uv_timer_t *t)
{
    struct app *a = t->data;
    if (atomic_load(&a->backend->lost) != 2)
        return;
    uv_timer_stop(t);
    a->exit_status = DASHD_EXIT_DEVICE_LOST;
    log_error("the GPU context is lost (%s): every later op would fail; stopping with exit status "
              "%d so that a fresh dashd serves (under systemd: restarted at once)",
              a->backend->lost_why, DASHD_EXIT_DEVICE_LOST);
    if (a->stopping)
        return;
    a->stopping = 1;
    notify_stopping(a->notify, "stopping: the GPU context is lost (%s)", a->backend->lost_why);
    dispatch_stop(a->disp, on_idle, a);
}

/* ---- main ------------------------------------------------------------------------------------ */

/* Raise the soft limit on open files to the hard one (services start at 1024), then size the
 * connection limit so that connections can never use up the descriptors: accept() failing
 * with EMFILE would refuse everyone, and what else needs a descriptor would fail. */
static uint32_t connection_limit(uint32_t asked)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        log_warn("cannot read the open-file limit: %s", strerror(errno));
        return asked ? asked : SERVER_DEFAULT_CONNECTIONS;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            log_warn("cannot raise the open-file limit from %llu to %llu: %s",
                     (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
            rl.rlim_cur = was;
        }
    }
    uint64_t fds = rl.rlim_cur == RLIM_INFINITY ? UINT32_MAX : (uint64_t)rl.rlim_cur;
    uint64_t reserve = FD_RESERVE_MIN + fds / 8;
    uint64_t fit = fds > reserve ? fds - reserve : 1;
    uint64_t want = asked ? asked : SERVER_DEFAULT_CONNECTIONS;
    if (want > fit) {
        if (asked)
            log_warn("--max-connections %u: the open-file limit is %llu, so at most %llu "
                     "connections are served", asked, (unsigned long long)fds,
                     (unsigned long long)fit);
        want = fit;
    }
    return (uint32_t)want;
}

/* The backend --backend asks for, or NULL having logged why. */
static struct backend *start_backend(const struct config *o)
{
    struct backend *b = NULL;
#ifdef DASH_HAVE_CUDA
    if (o->backend != CONFIG_BACKEND_CPU) {
        char why[256];
        b = backend_cuda_new(o->device, o->kernels, why, sizeof why);
        if (b) {
            if (o->backend == CONFIG_BACKEND_AUTO)
                log_info("backend auto: serving from the GPU: %s", b->device);
            return b;
        }
        if (o->backend == CONFIG_BACKEND_CUDA) {
            log_error("--backend cuda: %s", why);
            return NULL;
        }
        log_info("backend auto: no usable GPU (%s); serving from the CPU engine", why);
    }
#else
    if (o->backend == CONFIG_BACKEND_AUTO)
        log_info("backend auto: this build has no CUDA backend; serving from the CPU engine");
#endif
    b = backend_cpu_new(o->threads);
    if (!b)
        log_error("cannot start the CPU engine with %d threads", o->threads);
    return b;
}

/* The private directory of the default endpoint (wire_private_dir), when path is in it:
 * made with mode 0700 if missing, and refused unless it is a real directory of ours that
 * only we can enter, since whoever controls it controls the socket clients trust. Returns
 * 0, or -1 having said why. */
static int make_private_dir(const char *path)
{
    char dir[64], why[512];
    if (wire_private_dir(dir, sizeof dir) != 0)
        return 0;
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0 || path[n] != '/' || strchr(path + n + 1, '/'))
        return 0;
    if (mkdir(dir, 0700) == 0)
        log_info("made %s (mode 0700) for the socket", dir);
    else if (errno != EEXIST) {
        fprintf(stderr, "dashd: cannot make %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (wire_private_dir_check(dir, getuid(), why, sizeof why) != 0) {
        fprintf(stderr, "dashd: refusing to serve in %s: %s\n", dir, why);
        return -1;
    }
    return 0;
}

/* lockfile_acquire() left another user's lock file alone: say so, and whose it is. */
static void warn_foreign_lock(const char *lock_path)
{
    struct stat st;
    if (lstat(lock_path, &st) == 0)
        log_warn("the lock file %s belongs to uid %u, not to us (uid %u): not using it, serving "
                 "without a lock; have its owner or root remove it", lock_path,
                 (unsigned)st.st_uid, (unsigned)geteuid());
    else
        log_warn("the lock file %s is not ours: not using it, serving without a lock", lock_path);
}

/* Bound where libdash refuses to connect (wire_endpoint_check: a directory others can
 * write), the daemon would serve nobody: say so at start. */
static void warn_if_clients_refuse(const char *endpoint)
{
    char why[1024];
    int64_t owner;
    if (wire_endpoint_check(endpoint, &owner, why, sizeof why) == DASH_EPERM)
        log_warn("libdash clients will refuse this endpoint: %s", why);
}

int main(int argc, char **argv)
{
    struct config o;
    int rc = parse_options(argc, argv, &o, 0);
    if (rc >= 0)
        return rc;
    log_set_level((enum log_level)o.level);
    (void)log_init();
#ifndef DASH_HAVE_CUDA
    if (o.backend == CONFIG_BACKEND_CUDA) {
        fprintf(stderr, "dashd: --backend cuda: this dashd was built without CUDA (nvcc was not "
                "found, or CUDA=0); use --backend cpu or auto\n");
        return 1;
    }
#endif
    if (!o.threads)
        o.threads = online_cpus();

    struct app a;
    memset(&a, 0, sizeof a);
    a.cfg = o;
    a.argc = argc;
    a.argv = argv;
    int status = 1;
    char lock_path[512];
    const char *path = wire_ipc_path(o.endpoint);
    /* An abstract ("@name") socket has no file to steal or leave behind: a second bind
     * fails by itself. */
    if (path && path[0] != '@') {
        if (make_private_dir(path) != 0)
            return 1;
        snprintf(lock_path, sizeof lock_path, "%s.lock", path);
        rc = lockfile_acquire(lock_path, &a.lock);
        if (rc == -EWOULDBLOCK) {
            fprintf(stderr, "dashd: another dashd is serving %s (lock %s is held)\n", o.endpoint,
                    lock_path);
            return 1;
        }
        if (rc == -EPERM) {
            warn_foreign_lock(lock_path);
        } else if (rc) {
            fprintf(stderr, "dashd: cannot lock %s: %s\n", lock_path, strerror(-rc));
            return 1;
        }
        /* With or without the lock, binding must take nothing from anyone: only a socket of
         * ours on which nothing answers (a dead daemon's) is removed. */
        char why[512];
        int removed;
        if (lockfile_claim_socket(path, &removed, why, sizeof why) != 0) {
            fprintf(stderr, "dashd: cannot serve %s: %s\n", o.endpoint, why);
            lockfile_release(a.lock);
            return 1;
        }
        if (removed)
            log_info("removed the stale socket %s (nothing answered on it)", path);
        warn_if_clients_refuse(o.endpoint);
        a.sock_path = path;
    }

    if ((rc = guard_install()) != 0) {
        log_error("cannot install the SIGBUS handler: %s", strerror(-rc));
        goto release_lock;
    }
    signal(SIGPIPE, SIG_IGN);
    /* A file-size limit (RLIMIT_FSIZE) makes the audit log's write fail with EFBIG, which
     * the writer handles, instead of killing the daemon. */
    signal(SIGXFSZ, SIG_IGN);

    notify_status(NULL, "starting the backend");
    struct backend *b = start_backend(&o);
    if (!b)
        goto release_lock;
    /* Before READY: the first client must not pay for loading kernels. */
    notify_status(NULL, "warming up the %s backend", b->name);
    char warm_why[512];
    int64_t warm_t0 = (int64_t)uv_hrtime();
    if ((rc = warmup_run(b, warm_why, sizeof warm_why)) < 0)
        log_warn("warm-up failed (%s); serving anyway, each request says what fails", warm_why);
    else
        log_info("warm-up: %d ops in %.1f ms", rc, (double)((int64_t)uv_hrtime() - warm_t0) / 1e6);

    if ((rc = uv_loop_init(&a.loop)) != 0) {
        log_error("cannot create the event loop: %s", uv_strerror(rc));
        goto free_backend;
    }
    if (!(a.notify = notify_new(&a.loop))) {
        log_error("out of memory");
        goto close_loop;
    }
    char mem_why[1200];
    const uint64_t mem = memcap_bytes(mem_why, sizeof mem_why);
    if (o.audit_path[0] && o.audit_level != AUDIT_OFF && !(a.audit = open_audit(&o)))
        goto close_loop;
    char kernel_build[96];
    snprintf(kernel_build, sizeof kernel_build, "dashd " DASHD_VERSION " build " DASH_BUILD_ID
             " backend %s", b->name);
    struct dispatch_config cfg = {
        .queue_capacity = o.queue,
        .session_timeout_ms = (uint32_t)llround(o.session_timeout_s * 1000.0),
        /* One op's host memory (its tensors' dense copies and the CPU engine's working
         * memory) may take up to half the memory we may use (the RAM, or a cgroup's limit
         * when lower), or --op-memory up to all of it: a sparse shm object, broadcast inputs
         * or GQA's float sums must not make us allocate what we do not have and get killed
         * for it. */
        .scratch_max = op_memory_max(o.op_memory, mem),
        .max_buffers = MAX_BUFFERS_PER_SESSION,
        .limits = o.limits,
        .audit = a.audit,
        .kernel_build = kernel_build,
    };
    if (cfg.session_timeout_ms == 0)
        cfg.session_timeout_ms = 1;
    a.disp = dispatch_new(&a.loop, b, &cfg);
    if (!a.disp) {
        log_error("cannot start the request queue");
        goto close_loop;
    }
    char err[512];
    struct server_config sc = {.endpoint = o.endpoint,
                               .max_connections = connection_limit(o.max_connections),
                               .reply_bytes = o.reply_bytes,
                               .client_connections = o.limits.connections,
                               .on_msg = dispatch_on_message,
                               .on_gone = dispatch_on_gone,
                               .ctx = a.disp};
    a.srv = server_new(&a.loop, &sc, err, sizeof err);
    if (!a.srv) {
        log_error("%s", err);
        dispatch_close(a.disp);
        notify_close(a.notify);
        goto run_closes;
    }
    dispatch_set_server(a.disp, a.srv);
    if (o.metrics[0]) {
        a.metrics = metrics_http_new(&a.loop, o.metrics, dispatch_collect, a.disp, err, sizeof err);
        if (!a.metrics) {
            log_error("%s", err);
            server_close(a.srv, 0);
            dispatch_close(a.disp);
            notify_close(a.notify);
            goto run_closes;
        }
        const char *colon = strrchr(o.metrics, ':');
        log_info("metrics at http://%.*s:%u/metrics", (int)(colon - o.metrics), o.metrics,
                 metrics_http_port(a.metrics));
    }
    if (a.sock_path && stat(a.sock_path, &a.sock_st) != 0)
        memset(&a.sock_st, 0, sizeof a.sock_st);
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_init(&a.loop, &a.sigint);
    uv_signal_init(&a.loop, &a.sighup);
    a.sigterm.data = a.sigint.data = a.sighup.data = &a;
    uv_signal_start(&a.sigterm, on_signal, SIGTERM);
    uv_signal_start(&a.sigint, on_signal, SIGINT);
    uv_signal_start(&a.sighup, on_sighup, SIGHUP);
    a.backend = b;
    uv_timer_init(&a.loop, &a.lost_timer);
    a.lost_timer.data = &a;
    /* only a backend on a device can lose it: a CPU dashd's loop is not woken for nothing */
    if (strcmp(b->name, "cuda") == 0)
        uv_timer_start(&a.lost_timer, on_lost_check, LOST_CHECK_MS, LOST_CHECK_MS);

    if (mem != UINT64_MAX)
        log_info("memory: %llu MiB (%s); one op's host memory is capped at %llu MiB%s",
                 (unsigned long long)(mem >> 20), mem_why,
                 (unsigned long long)(op_memory_max(o.op_memory, mem) >> 20),
                 o.op_memory ? " (--op-memory)" : "");
    else if (o.op_memory)
        log_info("one op's host memory is capped at %llu MiB (--op-memory)",
                 (unsigned long long)(o.op_memory >> 20));
    if (!path)
        log_warn("%s is not an ipc:// endpoint: peers have no credentials, so buffers are not "
                 "checked against the registering user", o.endpoint);
    char per_process[64] = "those without a session not capped a process";
    if (o.limits.connections)
        snprintf(per_process, sizeof per_process, "%u without a session a process",
                 o.limits.connections);
    log_info("dashd " DASHD_VERSION " serving %s (backend %s: %s; queue %u; session timeout %g s; "
             "at most %u connections, %s)", o.endpoint, b->name, b->device, o.queue,
             o.session_timeout_s, sc.max_connections, per_process);
    if (b->gpu_sharing && strcmp(b->gpu_sharing, "mps") == 0)
        log_info("GPU sharing: MPS (clients that also run under MPS hand work to dashd without "
                 "a GPU context switch)");
    else if (b->gpu_sharing)
        log_info("GPU sharing: no MPS; the GPU time-slices between dashd's context and each "
                 "client's, so every stream-ordered op costs two context switches (about 0.26 ms "
                 "on an H200). For full speed run dashd and its clients under MPS: docs/mps.md");
    if (notify_watchdog_usec(a.notify))
        log_info("systemd watchdog: pinging every %llu ms",
                 (unsigned long long)(notify_watchdog_usec(a.notify) / 2000));
    notify_ready(a.notify, "serving %s (backend %s)", o.endpoint, b->name);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    status = a.exit_status;

run_closes:
    /* Let the loop run the close callbacks of every handle before anything is freed. */
    uv_run(&a.loop, UV_RUN_DEFAULT);
    server_free(a.srv);
    dispatch_free(a.disp);
close_loop:
    /* a failure before the loop ran leaves the timer open: close it first */
    notify_close(a.notify);
    (void)uv_run(&a.loop, UV_RUN_DEFAULT);
    notify_free(a.notify);
    /* every job is done and audited by now: the close writes and syncs the last records */
    audit_close(a.audit);
    if (uv_loop_close(&a.loop) != 0)
        log_warn("the event loop still had open handles at exit");
free_backend:
    backend_free(b);
release_lock:
    /* The socket first, while the lock still keeps others from binding. */
    remove_socket(&a);
    lockfile_release(a.lock);
    if (status == 0)
        log_info("stopped");
    return status;
}
