// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_notify.c - dashd and its service manager (daemon/notify.c): a real dashd started
 * with $NOTIFY_SOCKET naming an AF_UNIX datagram socket of the test, as systemd starts a
 * Type=notify service, and what arrives on it: STATUS lines while it starts, READY=1 once
 * it answers, WATCHDOG=1 at half of $WATCHDOG_USEC (WatchdogSec=) while its loop turns
 * (and none while it is stopped), and STOPPING=1 on SIGTERM.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"

#include <CUnit/CUnit.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static int sock_fd = -1;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A fresh datagram socket, named in $NOTIFY_SOCKET for the dashd started next; watchdog
 * NULL leaves $WATCHDOG_USEC unset. */
static int listen_notify(const char *watchdog_usec, const char *watchdog_pid)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(dir, sizeof dir, "/tmp/dash-notify-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", dir);
    sock_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock_fd < 0 || bind(sock_fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    setenv("NOTIFY_SOCKET", sa.sun_path, 1);
    if (watchdog_usec)
        setenv("WATCHDOG_USEC", watchdog_usec, 1);
    if (watchdog_pid)
        setenv("WATCHDOG_PID", watchdog_pid, 1);
    return 0;
}

static void teardown(void)
{
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    if (sock_fd >= 0)
        close(sock_fd);
    sock_fd = -1;
    if (dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        (void)tu_run(cmd, NULL);
        dir[0] = '\0';
    }
}

/* The next datagram within ms into buf ("" on timeout). */
static void recv_msg(char *buf, size_t len, int ms)
{
    struct pollfd p = {.fd = sock_fd, .events = POLLIN};
    buf[0] = '\0';
    if (poll(&p, 1, ms) != 1)
        return;
    ssize_t n = recv(sock_fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
}

/* Messages until one contains want (returns 1), or ms pass (0). Counts the WATCHDOG=1 seen
 * into *pings when not NULL, and the first time one came. */
static int wait_for(const char *want, int ms, int *pings, char *seen, size_t seen_len)
{
    int64_t end = now_ms() + ms;
    char m[1024];
    if (seen)
        seen[0] = '\0';
    while (now_ms() < end) {
        recv_msg(m, sizeof m, (int)(end - now_ms()));
        if (!m[0])
            continue;
        if (seen && strlen(seen) + strlen(m) + 2 < seen_len) {
            strcat(seen, m);
            strcat(seen, "|");
        }
        if (pings && strcmp(m, "WATCHDOG=1") == 0)
            (*pings)++;
        if (want && strstr(m, want))
            return 1;
    }
    return 0;
}

static void test_notify_status_lines_then_ready_once_serving_then_stopping(void)
{
    CU_ASSERT_FATAL(listen_notify(NULL, NULL) == 0);
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--backend cpu") == 0);
    char seen[4096];
    CU_ASSERT(wait_for("READY=1", 5000, NULL, seen, sizeof seen));
    /* what systemctl status shows while it starts, and what it serves once ready */
    CU_ASSERT_PTR_NOT_NULL(strstr(seen, "STATUS=warming up the cpu backend"));
    char want[256];
    snprintf(want, sizeof want, "READY=1\nSTATUS=serving %s", d.endpoint);
    CU_ASSERT_PTR_NOT_NULL(strstr(seen, want));
    /* no watchdog was asked for: none is sent */
    CU_ASSERT_PTR_NULL(strstr(seen, "WATCHDOG"));
    int pings = 0;
    CU_ASSERT(!wait_for("WATCHDOG", 300, &pings, NULL, 0));
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    CU_ASSERT(wait_for("STOPPING=1", 1000, NULL, seen, sizeof seen)); /* queued meanwhile */
}

static void test_notify_watchdog_pings_at_half_the_interval_while_serving(void)
{
    CU_ASSERT_FATAL(listen_notify("200000", NULL) == 0); /* WatchdogSec=200ms */
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--backend cpu") == 0);
    CU_ASSERT(wait_for("READY=1", 5000, NULL, NULL, 0));
    /* every 100 ms: about 10 in a second; at least 6 leaves room for a loaded machine */
    int pings = 0;
    (void)wait_for(NULL, 1000, &pings, NULL, 0);
    CU_ASSERT(pings >= 6 && pings <= 12);
    /* serving a client changes nothing */
    struct raw_client *r = raw_connect(d.endpoint);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(raw_hello(r, WIRE_PROTOCOL_VERSION), 0);
    raw_close(r);
    /* a stopped loop sends nothing: systemd would kill and restart it */
    kill(d.pid, SIGSTOP);
    (void)wait_for(NULL, 150, NULL, NULL, 0); /* what was sent before the stop */
    pings = 0;
    (void)wait_for(NULL, 500, &pings, NULL, 0);
    CU_ASSERT(pings <= 1);
    kill(d.pid, SIGCONT);
    pings = 0;
    (void)wait_for(NULL, 500, &pings, NULL, 0);
    CU_ASSERT(pings >= 2);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

static void test_notify_watchdog_for_another_pid_is_not_ours(void)
{
    /* $WATCHDOG_PID names the process systemd watches; a child that inherited it is not */
    CU_ASSERT_FATAL(listen_notify("200000", "1") == 0);
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--backend cpu") == 0);
    CU_ASSERT(wait_for("READY=1", 5000, NULL, NULL, 0));
    int pings = 0;
    (void)wait_for(NULL, 500, &pings, NULL, 0);
    CU_ASSERT_EQUAL(pings, 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

int suite_notify(void)
{
    CU_pSuite s = CU_add_suite_with_setup_and_teardown("notify", NULL, NULL, NULL, teardown);
    if (!s)
        return -1;
    ADD_TEST(s, test_notify_status_lines_then_ready_once_serving_then_stopping);
    ADD_TEST(s, test_notify_watchdog_pings_at_half_the_interval_while_serving);
    ADD_TEST(s, test_notify_watchdog_for_another_pid_is_not_ours);
    return 0;
}
