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
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct lockfile {
    int fd;
    char *path;
};

int lockfile_acquire(const char *path, struct lockfile **ret_lock)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return -errno;
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
