// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_churn.c - dashd under churn: clients quitting mid-request while others ping, for
 * minutes (tests/churn.h says what each does). Issue 14's check that no request is left
 * unanswered: every ping must come back, none later than the bound.
 *
 *   bench_churn [--seconds N] [--quitters T] [--pingers P] [--bound-ms B] [--out DIR]
 *
 * Starts its own dashd (<dir of argv[0]>/dashd, CPU backend, a private endpoint), runs
 * the churn for N seconds (default 600) with T quitter threads (default 3) and P pinger
 * threads (default 2), stops the daemon with SIGTERM. The report (stdout, and with --out
 * DIR also DIR/churn-YYYY-MM-DD.md) has the date, machine, commit and command, the counts,
 * the ping round trips and the daemon's resident memory before and after.
 * Exit status: 0 every ping answered within the bound and the daemon exited cleanly;
 * 1 otherwise; 2 bad usage.
 */
#include "bench/benchmeta.h"
#include "tests/churn.h"
#include "tests/harness.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int usage(void)
{
    fprintf(stderr, "usage: bench_churn [--seconds N] [--quitters T] [--pingers P] "
                    "[--bound-ms B] [--out DIR]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct churn_opts o = {.seconds = 600, .quitter_threads = 3, .pinger_threads = 2,
                           .bound_ms = 2000};
    const char *out_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (!strcmp(a, "--seconds"))
            o.seconds = atof(v);
        else if (!strcmp(a, "--quitters"))
            o.quitter_threads = atoi(v);
        else if (!strcmp(a, "--pingers"))
            o.pinger_threads = atoi(v);
        else if (!strcmp(a, "--bound-ms"))
            o.bound_ms = atoi(v);
        else if (!strcmp(a, "--out"))
            out_dir = v;
        else
            return usage();
        i++;
    }
    if (o.seconds <= 0 || o.quitter_threads < 1 || o.pinger_threads < 1 || o.bound_ms < 1)
        return usage();

    struct dashd_proc d;
    if (dashd_start(&d, "--session-timeout 30") != 0) {
        fprintf(stderr, "bench_churn: dashd did not start (log: %s)\n", d.log_path);
        return 1;
    }
    o.endpoint = d.endpoint;
    long rss0 = tu_rss_kib(d.pid);
    fprintf(stderr, "bench_churn: %g s against %s...\n", o.seconds, d.endpoint);
    struct churn_result r;
    int rc = churn_run(&o, &r);
    long rss1 = tu_rss_kib(d.pid);
    int alive = dashd_alive(&d);
    int stop = dashd_stop(&d);

    char cpu[256], load[64], commit[64], cmd[1024], date[32];
    struct utsname un;
    uname(&un);
    bmeta_cpu_model(cpu, sizeof cpu);
    bmeta_loadavg(load, sizeof load);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmd, sizeof cmd, argc, argv);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    int ok = rc == 0 && r.lost == 0 && r.late == 0 && r.quitter_errors == 0 && alive && stop == 0;

    char report[4096];
    snprintf(report, sizeof report,
             "# dashd under churn: clients quitting mid-request while others ping\n\n"
             "- date: %s (UTC)\n- machine: %s, %ld CPUs, %s %s; load average at the end %s\n"
             "- commit: %s\n- command: `%s`\n- daemon: CPU backend, 2 engine threads, "
             "session timeout 30 s\n\n"
             "Each quitter connects, says Hello, registers a shared buffer, sends a causal "
             "forward (1, 64, 1, 32) float32 and 8 pings, and closes its socket without "
             "reading (linger 0). Each pinger sends one ping at a time on one connection and "
             "waits for it; a ping not answered within %d ms is late, one not answered within "
             "30 s is lost.\n\n"
             "| | |\n| --- | --- |\n"
             "| ran | %.1f s, %d quitter threads, %d pinger threads |\n"
             "| quitters (quit mid-request) | %llu (%.0f per second) |\n"
             "| quitters that failed to set up | %llu |\n"
             "| pings answered | %llu |\n"
             "| pings late (> %d ms) | %llu |\n"
             "| pings lost | %llu |\n"
             "| ping round trip p50 / p99 / max | %.0f / %.0f / %.0f us |\n"
             "| dashd RSS before / after | %ld / %ld KiB |\n"
             "| dashd alive at the end, SIGTERM exit status | %s, %d |\n\n"
             "Result: %s\n",
             date, cpu, sysconf(_SC_NPROCESSORS_ONLN), un.sysname, un.release, load, commit,
             cmd, o.bound_ms, r.seconds, o.quitter_threads, o.pinger_threads,
             (unsigned long long)r.quitters, r.seconds > 0 ? (double)r.quitters / r.seconds : 0,
             (unsigned long long)r.quitter_errors, (unsigned long long)r.pings, o.bound_ms,
             (unsigned long long)r.late, (unsigned long long)r.lost, r.p50_us, r.p99_us,
             r.max_us, rss0, rss1, alive ? "yes" : "no", stop,
             ok ? "every request answered within the bound." : "FAILED (see the counts).");
    fputs(report, stdout);
    if (out_dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/churn-%s.md", out_dir, date);
        FILE *f = fopen(path, "w");
        if (!f || fputs(report, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "bench_churn: cannot write %s\n", path);
            return 1;
        }
        fprintf(stderr, "bench_churn: wrote %s\n", path);
    }
    return ok ? 0 : 1;
}
