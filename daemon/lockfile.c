// SPDX-License-Identifier: BSD-3-Clause
/*
 * lockfile.c - see lockfile.h.
 *
 * Unlinking a lock file on exit races with a newcomer that opened the old file just
 * before the unlink: it would then lock an inode nobody else can find, and a third
 * daemon could lock a fresh file at the same path. So after locking, the path must still
 * name the inode we locked; if not, we start over on the new file.
 */
#include "lockfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct lockfile {
    int fd;
    char *path;
};

int lockfile_acquire(const char *path, struct lockfile **ret_lock)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        /* Someone else's file is not opened at all: root could open it, and its owner could
         * then hold a lock of their own on it to stop us. */
        struct stat before;
        if (lstat(path, &before) == 0 && before.st_uid != geteuid())
            return -EPERM;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return -errno;
        struct stat opened;
        if (fstat(fd, &opened) < 0) {
            int rc = -errno;
            close(fd);
            return rc;
        }
        if (opened.st_uid != geteuid() || !S_ISREG(opened.st_mode)) {
            close(fd); /* swapped in since the lstat */
            return -EPERM;
        }
        /* Only we need to open it: a reader could take the lock too (flock works on any
         * descriptor), so an old 0644 file is made private. */
        (void)fchmod(fd, 0600);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int rc = errno == EWOULDBLOCK ? -EWOULDBLOCK : -errno;
            close(fd);
            return rc;
        }
        struct stat held, named;
        if (fstat(fd, &held) < 0) {
            int rc = -errno;
            close(fd);
            return rc;
        }
        if (stat(path, &named) < 0 || named.st_ino != held.st_ino || named.st_dev != held.st_dev) {
            close(fd); /* the file we locked was unlinked meanwhile: try the new one */
            continue;
        }
        struct lockfile *l = malloc(sizeof *l);
        char *copy = strdup(path);
        if (!l || !copy) {
            free(l);
            free(copy);
            close(fd);
            return -ENOMEM;
        }
        l->fd = fd;
        l->path = copy;
        *ret_lock = l;
        return 0;
    }
    return -EAGAIN;
}

void lockfile_release(struct lockfile *l)
{
    if (!l)
        return;
    /* Only our own file: if someone removed it and a newer daemon made a fresh one, that
     * one is not ours to delete. */
    struct stat held, named;
    if (fstat(l->fd, &held) == 0 && stat(l->path, &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
        (void)unlink(l->path);
    close(l->fd);
    free(l->path);
    free(l);
}

int lockfile_claim_socket(const char *path, int *ret_removed, char *why, size_t len)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) {
            *ret_removed = 0;
            return 0;
        }
        int e = errno;
        snprintf(why, len, "cannot look at %s: %s", path, strerror(e));
        return -e;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, len,
                 "%s belongs to uid %u, not to us (uid %u): another user's daemon, or a file put "
                 "there to keep us off it; have its owner or root remove it, or pass another "
                 "--endpoint",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, len, "%s is there and is not a socket: remove it, or pass another --endpoint",
                 path);
        return -ENOTSOCK;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(why, len, "%s: the path is too long for a socket", path);
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(why, len, "cannot probe %s: %s", path, strerror(e));
        return -e;
    }
    /* Non-blocking: a live socket whose backlog is full says EAGAIN instead of blocking. */
    int answered = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EAGAIN ||
                   errno == EINPROGRESS;
    int e = errno;
    close(fd);
    if (answered) {
        snprintf(why, len,
                 "something is serving %s (a connection to it was accepted), probably another "
                 "dashd: stop it first, or pass another --endpoint",
                 path);
        return -EADDRINUSE;
    }
    if (e != ECONNREFUSED) {
        snprintf(why, len, "%s is there and cannot be probed (%s): remove it if no daemon uses it",
                 path, strerror(e));
        return -e;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        e = errno;
        snprintf(why, len, "cannot remove the stale socket %s: %s", path, strerror(e));
        return -e;
    }
    *ret_removed = 1;
    return 0;
}
