// SPDX-License-Identifier: BSD-3-Clause
/*
 * lockfile.h - what keeps a second dashd off an ipc:// endpoint, and keeps other users
 * from keeping dashd off it.
 *
 * Binding an ipc path can take the socket from a process that serves it (ZeroMQ unlinks the
 * path first), so before binding, the daemon holds an exclusive flock on
 * "<socket path>.lock", and then claims the path: a file there must be its own user's
 * socket on which nothing answers (a dead daemon's), which it removes. On exit it unlinks
 * the socket and then the lock file, while still holding the lock.
 *
 * In a sticky directory such as /tmp, anyone can create the lock file first. A lock file
 * of another user is therefore not used (locking it would let its owner stop us, by
 * holding a lock of their own on it): the daemon runs without one, and claiming the path
 * is then what keeps a second daemon off a live socket.
 */
#ifndef DASHD_LOCKFILE_H
#define DASHD_LOCKFILE_H

#include <stddef.h>

struct lockfile;

/* Create (mode 0600) or open `path`, which must be a regular file of our effective uid,
 * and lock it without blocking. On success *ret_lock holds the lock. Returns 0,
 * -EWOULDBLOCK if another process holds it, -EPERM if the file belongs to another user
 * (it is left alone), or -errno. */
int lockfile_acquire(const char *path, struct lockfile **ret_lock);

/* Make binding the ipc socket `path` take nothing from anyone. Returns 0 and *ret_removed:
 * 0 when nothing is there, 1 when our own socket was there with nobody serving it (a
 * connect() was refused) and it was removed. Otherwise -EPERM (another user's file),
 * -EADDRINUSE (something answers on it), -ENOTSOCK (not a socket) or another -errno, with a
 * sentence saying whose file it is and what to do written into why (at most len bytes). */
int lockfile_claim_socket(const char *path, int *ret_removed, char *why, size_t len);

/* Unlink the lock file (if the path still names the file we locked), then release the
 * lock. Accepts NULL. */
void lockfile_release(struct lockfile *l);

#endif
