/*
 * lockfile.h - the lock that keeps a second dashd off an ipc:// endpoint.
 *
 * ZeroMQ lets a second bind to an ipc path silently take the socket from the first
 * process, so before binding, the daemon holds an exclusive flock on "<socket path>.lock".
 * Only the lock holder may unlink a stale socket file and bind; on exit it unlinks the
 * socket and then the lock file, while still holding the lock.
 */
#ifndef DASHD_LOCKFILE_H
#define DASHD_LOCKFILE_H

struct lockfile;

/* Create (mode 0644) or open `path` and lock it without blocking. On success *ret_lock
 * holds the lock. Returns 0, -EWOULDBLOCK if another process holds it, or -errno. */
int lockfile_acquire(const char *path, struct lockfile **ret_lock);

/* Unlink the lock file (if the path still names the file we locked), then release the
 * lock. Accepts NULL. */
void lockfile_release(struct lockfile *l);

#endif
