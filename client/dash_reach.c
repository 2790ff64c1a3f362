// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_reach.c - before dash_connect() waits for an answer: is there anything at the
 * endpoint to wait for? ZeroMQ connects in the background and retries forever, so a
 * missing socket file, a file nothing listens on (a daemon that was killed) or a socket
 * the caller may not open would each look like a daemon that does not answer, and the
 * caller would learn only after the timeout that nothing was ever there, without knowing
 * which. One connect(2) of our own on the socket's path tells them apart at once; the
 * connection is closed unused (dashd drops a peer that closes before its greeting).
 * An abstract name (ipc://@NAME) has no file; refused means nothing is bound. A tcp:// endpoint with a numeric
 * address gets one connect(2) too, given REACH_TCP_MS to answer: refused means nothing
 * listens there (said at once); anything else - a name, a connection accepted, no answer
 * yet (a firewall) - passes, and ZeroMQ's timeout speaks.
 *
 * And the text of the failures dash_connect_explain() gives (dash.h), and which daemon
 * serves a CUDA device (dash_default_endpoint_cuda).
 */
#include "client/dash_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <netdb.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* "owner uid 999, group 998, mode 0660" of path, or what stat said. */
static void describe(const char *path, char *buf, size_t len)
{
    struct stat st;
    if (stat(path, &st) != 0)
        snprintf(buf, len, "%s: %s", path, strerror(errno));
    else
        snprintf(buf, len, "%s: owner uid %u, group %u, mode %04o", path, (unsigned)st.st_uid,
                 (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777));
}

#define REACH_TCP_MS 1000

/* tcp://ADDRESS:PORT (ADDRESS an IPv4 address or [IPv6]): DASH_ECONNREFUSED when the
 * address refuses a connection on the port, else 0. */
static int reach_tcp(const char *endpoint, char *why, size_t len)
{
    const char *hp = endpoint + 6, *colon = strrchr(hp, ':');
    char host[128], port[16];
    if (!colon || strchr(hp, ';') || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof port)
        return 0; /* a source address (ZeroMQ's "src;dst") or no port: ZeroMQ's to judge */
    const char *h = hp;
    size_t hl = (size_t)(colon - hp);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof host)
        return 0;
    memcpy(host, h, hl);
    host[hl] = '\0';
    memcpy(port, colon + 1, strlen(colon + 1) + 1);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return 0; /* a host name: resolving it here could block; ZeroMQ resolves it */
    int refused = 0, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t el = sizeof err;
            if (poll(&p, 1, REACH_TCP_MS) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0)
                refused = err == ECONNREFUSED;
        } else if (rc != 0) {
            refused = errno == ECONNREFUSED;
        }
        close(fd);
    }
    freeaddrinfo(ai);
    if (refused)
        return wire_say(DASH_ECONNREFUSED, why, len,
                        "no dashd at %s: nothing listens on %s (connection refused: start "
                        "dashd --endpoint %s there, or check the address and port)",
                        endpoint, hp, endpoint);
    return 0;
}

int dash__reach(const char *endpoint, char *why, size_t len)
{
    const char *path = wire_ipc_path(endpoint);
    if (!path && strncmp(endpoint, "tcp://", 6) == 0)
        return reach_tcp(endpoint, why, len);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!path || !*path || strlen(path) >= sizeof sa.sun_path)
        return 0;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    socklen_t sl = sizeof sa;
    if (path[0] == '@') { /* Linux's abstract name, as ZeroMQ binds it: a NUL, then the name */
        sa.sun_path[0] = '\0';
        sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0; /* out of descriptors: ZeroMQ will say so */
    int rc = connect(fd, (struct sockaddr *)&sa, sl), e = errno;
    close(fd);
    if (rc != 0 && path[0] == '@') /* no file to describe: refused is nothing bound */
        return e == ECONNREFUSED
                   ? wire_say(DASH_ECONNREFUSED, why, len,
                              "no dashd at %s: nothing listens on the abstract socket %s "
                              "(start dashd --endpoint %s)", endpoint, path, endpoint)
                   : 0;
    /* connected, or the daemon's backlog is full (it is there, and busy) */
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS || e == EINTR)
        return 0;
    if (e == ENOENT || e == ENOTDIR)
        return wire_say(DASH_ENOENT, why, len,
                   "no dashd at %s: %s does not exist (start dashd, `systemctl start dashd` or "
                   "dashd@N for GPU N; or set DASHD_ENDPOINT)", endpoint, path);
    if (e == ECONNREFUSED) {
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
            return wire_say(DASH_ECONNREFUSED, why, len,
                       "no dashd at %s: %s is not a socket", endpoint, path);
        return wire_say(DASH_ECONNREFUSED, why, len,
                   "no dashd at %s: nothing listens on %s (a dashd that was killed left it; "
                   "starting dashd again removes it)", endpoint, path);
    }
    if (e == EACCES || e == EPERM) {
        char sock[512], dir[512], parent[sizeof sa.sun_path];
        memcpy(parent, path, strlen(path) + 1);
        describe(path, sock, sizeof sock);
        describe(dirname(parent), dir, sizeof dir);
        return wire_say(DASH_EACCES, why, len,
                   "permission denied connecting to dashd at %s (you are uid %u; %s; %s): "
                   "the system daemon serves the members of its group (usermod -aG dash USER)",
                   endpoint, (unsigned)geteuid(), sock, dir);
    }
    return 0; /* anything else: let ZeroMQ try, and the timeout speak */
}

int dash_default_endpoint_cuda(int cuda_device, char *buf, size_t len)
{
    char busid[64];
    int gpu, rc;
    if (!buf || !len || cuda_device < 0)
        return DASH_EINVAL;
    if (getenv("DASHD_ENDPOINT")) /* it wins; no need to ask CUDA anything */
        return wire_client_endpoint(buf, len);
    if ((rc = dash__cuda_busid(cuda_device, busid, sizeof busid)) != 0)
        return rc;
    /* The driver lists every GPU, whatever CUDA_VISIBLE_DEVICES hides from us. */
    if (wire_gpu_index(busid, WIRE_NVIDIA_GPUS_DIR, &gpu) != 0) {
        /* No listing (a container without /proc/driver/nvidia): our ordinal is the index
         * only when nothing is hidden. */
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        gpu = visible && *visible ? -1 : cuda_device;
    }
    return wire_client_endpoint_gpu(gpu, buf, len);
}
