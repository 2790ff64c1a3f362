// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_soak.c - the long soak (tests/soak.h says what each client does): C client
 * processes x N mixed requests against one dashd, with clients vanishing mid-request,
 * reconnecting and sending bad requests; every good answer checked to the bit, and the
 * daemon's descriptors, mappings, RSS and the clients' shared memory compared before and
 * after.
 *
 *   bench_soak [--clients C] [--requests N] [--out DIR]     (default 8 x 10000)
 *
 * Starts its own dashd (<dir of argv[0]>/dashd, CPU backend, 2 engine threads, a private
 * endpoint) and stops it with SIGTERM. The report (stdout, and with --out DIR also
 * DIR/soak-YYYY-MM-DD.md) has the date, machine, commit and command.
 * Exit status: 0 when every answer was right, nothing grew and dashd exited cleanly;
 * 1 otherwise; 2 bad usage.
 */
#include "bench/benchmeta.h"
#include "tests/harness.h"
#include "tests/soak.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RSS_SLACK_KIB (8 * 1024)

int main(int argc, char **argv)
{
    struct soak_opts o = {.clients = 8, .requests = 10000, .seed = tu_seed()};
    const char *out_dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--clients"))
            o.clients = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--requests"))
            o.requests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out"))
            out_dir = argv[i + 1];
        else
            argc = -1;
    }
    if (argc < 0 || argc % 2 == 0 || o.clients < 1 || o.requests < 1) {
        fprintf(stderr, "usage: bench_soak [--clients C] [--requests N] [--out DIR]\n");
        return 2;
    }
    struct dashd_proc d;
    if (dashd_start(&d, "--threads 2 --session-timeout 5") != 0) {
        fprintf(stderr, "bench_soak: dashd did not start (log: %s)\n", d.log_path);
        return 1;
    }
    o.endpoint = d.endpoint;
    o.daemon_pid = d.pid;
    fprintf(stderr, "bench_soak: %d clients x %d requests against %s (seed %llu)...\n",
            o.clients, o.requests, d.endpoint, (unsigned long long)o.seed);
    struct soak_result r;
    int rc = soak_run(&o, &r);
    int alive = dashd_alive(&d);
    int stop = dashd_stop(&d);
    uint64_t sent = 0;
    for (int k = 0; k < SOAK_KINDS; k++)
        sent += r.sent[k];
    int ok = rc == 0 && alive && stop == 0 && r.good == sent &&
             sent == (uint64_t)o.clients * (uint64_t)o.requests && !r.wrong_bits &&
             !r.wrong_code && !r.clients_failed && r.after.fds <= r.idle.fds &&
             r.after.shm_objects == 0 && r.after.maps <= r.before.maps &&
             r.after.rss_kib <= r.before.rss_kib + RSS_SLACK_KIB;

    char cpu[256], load[64], commit[64], cmd[1024], date[32];
    bmeta_cpu_model(cpu, sizeof cpu);
    bmeta_loadavg(load, sizeof load);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmd, sizeof cmd, argc, argv);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "# dashd soak: %d clients x %d mixed requests\n\n"
            "- date: %s (UTC); machine: %s, %ld CPUs; load average at the end %s\n"
            "- commit: %s; command: `%s`; seed %llu\n"
            "- daemon: CPU backend, 2 engine threads, session timeout 5 s\n\n"
            "Each client process draws requests at random (tests/soak.h): forwards and "
            "backwards on three small bf16 problems, outputs poisoned and then compared byte "
            "for byte with the CPU engine's in the client's process; pings; stats; bad "
            "requests that must get DASH_EHEADDIM, DASH_EBOUNDS or DASH_ESHAPE; a buffer "
            "registered and freed; a forked process that registers, submits a forward and "
            "exits without reading; a forward submitted and the client closed at once, then "
            "connected again.\n\n| kind | sent |\n| --- | ---: |\n",
            o.clients, o.requests, date, cpu, sysconf(_SC_NPROCESSORS_ONLN), load, commit, cmd,
            (unsigned long long)o.seed);
    for (int k = 0; k < SOAK_KINDS; k++)
        fprintf(f, "| %s | %llu |\n", soak_kind_name((enum soak_kind)k),
                (unsigned long long)r.sent[k]);
    fprintf(f, "| all | %llu in %.1f s (%.0f per second) |\n\n", (unsigned long long)sent,
            r.seconds, r.seconds > 0 ? (double)sent / r.seconds : 0);
    fprintf(f, "| | |\n| --- | --- |\n"
            "| answered as expected | %llu |\n| outputs differing from the engine's | %llu |\n"
            "| unexpected codes | %llu |\n| client processes that failed | %d |\n"
            "| dashd fds idle / warm / after | %ld / %ld / %ld |\n"
            "| dashd maps idle / warm / after | %ld / %ld / %ld |\n"
            "| dashd RSS idle / warm / after | %ld / %ld / %ld KiB |\n"
            "| clients' shared-memory objects left | %ld |\n"
            "| dashd alive at the end, SIGTERM exit status | %s, %d |\n\n"
            "Warm: when the clients had done a tenth of their requests; after: when they and "
            "their sessions were gone.\n\nResult: %s\n",
            (unsigned long long)r.good, (unsigned long long)r.wrong_bits,
            (unsigned long long)r.wrong_code, r.clients_failed, r.idle.fds, r.before.fds,
            r.after.fds, r.idle.maps, r.before.maps, r.after.maps, r.idle.rss_kib,
            r.before.rss_kib, r.after.rss_kib, r.after.shm_objects, alive ? "yes" : "no", stop,
            ok ? "no crash, every answer as expected, nothing grew." : "FAILED (see the counts).");
    fclose(f);
    fputs(text, stdout);
    if (out_dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/soak-%s.md", out_dir, date);
        FILE *o2 = fopen(path, "w");
        if (!o2 || fwrite(text, 1, len, o2) != len || fclose(o2) != 0) {
            fprintf(stderr, "bench_soak: cannot write %s\n", path);
            ok = 0;
        }
    }
    free(text);
    return ok ? 0 : 1;
}
