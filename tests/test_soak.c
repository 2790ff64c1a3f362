// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_soak.c - a short soak (tests/soak.h): 8 client processes x 150 mixed requests
 * (forwards and backwards checked to the bit against the engine, pings, stats, bad
 * requests, buffer churn, clients vanishing mid-request, reconnects) against one dashd,
 * which must answer each as expected, hold no more descriptors, mappings or memory than
 * it settled at, leave no client's shared memory behind, and exit cleanly.
 * bench/bench_soak.c runs the long one (8 x 10,000).
 */
#include "suites.h"
#include "harness.h"
#include "soak.h"
#include "testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>

#define RSS_SLACK_KIB (8 * 1024)

/* Built with ASan (make asan) or TSan (make tsan, which says so in DASH_TEST_SANITIZED_DASHD),
 * dashd's allocator keeps freed memory in quarantine and maps as it likes, so its maps and
 * RSS say nothing about leaks there (LeakSanitizer checks those at its exit); descriptors
 * and shared memory are still counted. */
#ifdef __SANITIZE_ADDRESS__
#define CHECK_MEMORY 0
#else
#define CHECK_MEMORY 1
#endif

static void test_soak_mixed_clients_leave_dashd_as_it_was(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 2 --session-timeout 5") == 0);
    struct soak_opts o = {.endpoint = d.endpoint, .daemon_pid = d.pid, .clients = 8,
                          .requests = 150, .seed = tu_seed()};
    struct soak_result r;
    CU_ASSERT_FATAL(soak_run(&o, &r) == 0);
    uint64_t sent = 0;
    for (int k = 0; k < SOAK_KINDS; k++)
        sent += r.sent[k];
    CU_ASSERT(sent == 8 * 150);
    CU_ASSERT(r.good == sent);
    CU_ASSERT(r.wrong_bits == 0);
    CU_ASSERT(r.wrong_code == 0);
    CU_ASSERT(r.clients_failed == 0);
    CU_ASSERT(r.sent[SOAK_FORWARD] > 0 && r.sent[SOAK_BACKWARD] > 0 && r.sent[SOAK_BAD] > 0);
    CU_ASSERT(r.after.fds >= 0 && r.after.fds <= r.idle.fds);
    CU_ASSERT(r.after.shm_objects == 0);
    int memory_ok = r.after.maps >= 0 && r.after.maps <= r.before.maps && r.after.rss_kib >= 0 &&
                    r.after.rss_kib <= r.before.rss_kib + RSS_SLACK_KIB;
    const int check_memory = CHECK_MEMORY && !getenv("DASH_TEST_SANITIZED_DASHD");
    CU_ASSERT(memory_ok || !check_memory);
    if (getenv("SOAK_VERBOSE") || r.good != sent || r.after.fds > r.idle.fds ||
        r.after.shm_objects != 0 || (!memory_ok && check_memory))
        fprintf(stderr, "\nsoak: good %llu of %llu; fds %ld/%ld/%ld, maps %ld/%ld/%ld, rss "
                "%ld/%ld/%ld KiB (idle/warm/after), shm left %ld\n", (unsigned long long)r.good,
                (unsigned long long)sent, r.idle.fds, r.before.fds, r.after.fds, r.idle.maps,
                r.before.maps, r.after.maps, r.idle.rss_kib, r.before.rss_kib, r.after.rss_kib,
                r.after.shm_objects);
    CU_ASSERT(dashd_stop(&d) == 0);
}

int suite_soak(void)
{
    CU_pSuite s = CU_add_suite("soak", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_soak_mixed_clients_leave_dashd_as_it_was);
    return 0;
}
