// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_shm.c - buffers: POSIX shared-memory objects the daemon maps too, and what every
 * kind of buffer shares (registering, freeing; dash_cuda.c makes the CUDA ones).
 *
 * A buffer is created here (shm_open with O_EXCL under a name nobody else can have picked,
 * mode 0600, plus an ACL entry for the daemon's user when that is a service's, not ours or root),
 * mapped, and registered with the daemon. The daemon's id for it lives in the
 * struct dash_buffer and is replaced whenever the session is restored (libdash.c); callers
 * only ever hold the handle. The object is unlinked when the buffer is freed, so nothing is
 * left in /dev/shm once the client has closed, whatever the daemon did.
 */
#include "client/dash_internal.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/xattr.h>
#include <sys/stat.h>
#include <unistd.h>

/* Shared by every client of the process, so names differ even before the random part. */
static atomic_ulong shm_counter;

static void shm_make_name(char name[DASH__SHM_NAME_MAX])
{
    uint64_t rnd;
    if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        rnd = (uint64_t)dash__now_us() * 0x9e3779b97f4a7c15ull;
    snprintf(name, DASH__SHM_NAME_MAX, "/dash-%ld-%lu-%016llx", (long)getpid(),
             atomic_fetch_add(&shm_counter, 1), (unsigned long long)rnd);
}

/* The uid the daemon runs as, from the credentials of its last trusted message; -1 when
 * unknown (no ipc endpoint). */
static int64_t daemon_uid(const struct dash_client *c)
{
    int64_t uid = -1, pid;
    if (!c->peer_ok[0] || wire_peer_creds(c->peer_ok, &uid, &pid) != 0)
        return c->owner;
    return uid;
}

/* The object is ours, mode 0600; a daemon running as a service user (dashd.service's
 * dash) must open it too, and no one else: a POSIX ACL entry for that user alone, as
 * setfacl -m u:<uid>:rw would write it (the xattr's little-endian layout of
 * <linux/posix_acl_xattr.h>: a version, then tag, permissions, id for each entry in tag
 * order; the group's own entry stays empty and the mask admits only the named user).
 * Needs a tmpfs with ACLs (Debian's /dev/shm has them); 0 or -errno. */
static int grant_daemon(int fd, uint32_t uid)
{
    enum { USER_OBJ = 0x01, USER = 0x02, GROUP_OBJ = 0x04, MASK = 0x10, OTHER = 0x20 };
    const struct { uint16_t tag, perm; uint32_t id; } entries[] = {
        {USER_OBJ, 6, UINT32_MAX}, {USER, 6, uid}, {GROUP_OBJ, 0, UINT32_MAX},
        {MASK, 6, UINT32_MAX}, {OTHER, 0, UINT32_MAX},
    };
    unsigned char x[4 + 8 * 5], *p = x;
    uint32_t version = htole32(2);
    memcpy(p, &version, 4);
    p += 4;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        uint16_t tag = htole16(entries[i].tag), perm = htole16(entries[i].perm);
        uint32_t id = htole32(entries[i].id);
        memcpy(p, &tag, 2);
        memcpy(p + 2, &perm, 2);
        memcpy(p + 4, &id, 4);
        p += 8;
    }
    return fsetxattr(fd, "system.posix_acl_access", x, sizeof x, 0) == 0 ? 0 : -errno;
}

/* Create, size, reserve and map the object, open to the daemon's user grant_uid (-1:
 * the daemon needs no entry: it is us or root). Returns 0 or -errno; nothing remains on failure. */
static int shm_create(struct dash_buffer *b, int64_t grant_uid)
{
    int fd = -1, rc, e;
    for (int tries = 0; fd < 0; tries++) {
        shm_make_name(b->name);
        fd = shm_open(b->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && (errno != EEXIST || tries == 8))
            return -errno;
    }
    if (grant_uid >= 0 && (rc = grant_daemon(fd, (uint32_t)grant_uid)) != 0)
        goto unlink;
    if (ftruncate(fd, (off_t)b->size) != 0) {
        rc = -errno;
        goto unlink;
    }
    /* tmpfs pages are allocated on first touch; reserving them now turns a full /dev/shm
     * into ENOSPC here instead of a SIGBUS in whoever writes the tensor */
    while ((e = posix_fallocate(fd, 0, (off_t)b->size)) == EINTR)
        ;
    if (e != 0) {
        rc = -e;
        goto unlink;
    }
    b->data = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b->data == MAP_FAILED) {
        b->data = NULL;
        rc = -errno;
        goto unlink;
    }
    close(fd);
    return 0;

unlink:
    close(fd);
    shm_unlink(b->name);
    return rc;
}

void dash__buffer_destroy(struct dash_client *c, struct dash_buffer *b, int unlink_name)
{
    if (b->reg_req)
        b->reg_req->buf = NULL; /* its reply will be undone, see on_register() */
    if (b->prev)
        b->prev->next = b->next;
    else
        c->bufs = b->next;
    if (b->next)
        b->next->prev = b->prev;
    if (b->kind == DASH__BUF_SHM) {
        if (b->data)
            munmap(b->data, b->size);
        if (unlink_name)
            shm_unlink(b->name);
    }
    free(b);
}

static int buf_settled(struct dash_client *c, const void *arg)
{
    (void)c;
    const struct dash_buffer *b = arg;
    return b->reg == DASH__REG_OK || b->reg == DASH__REG_FAILED;
}

int dash__buffer_adopt(struct dash_client *c, struct dash_buffer *b)
{
    b->reg = DASH__REG_NONE;
    b->prev = NULL;
    b->next = c->bufs;
    if (c->bufs)
        c->bufs->prev = b;
    c->bufs = b;

    int64_t now = dash__now_ms();
    int rc;
    if ((rc = dash__register(c, b)) == 0 && (rc = dash__wait(c, buf_settled, b, -1, now)) == 0 &&
        b->reg == DASH__REG_FAILED)
        rc = b->reg_code;
    if (rc)
        dash__buffer_destroy(c, b, 1);
    return rc;
}

int dash_shm_alloc(struct dash_client *c, size_t size, struct dash_buffer **ret_buf)
{
    if (!c || !ret_buf || size == 0 || size > (size_t)INT64_MAX)
        return DASH_EINVAL;
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return DASH_ENOSESSION;

    struct dash_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return DASH_ENOMEM;
    b->owner = c;
    b->kind = DASH__BUF_SHM;
    b->size = size;
    /* A daemon of another user (a service's) needs an ACL entry to open the object. */
    int64_t uid = daemon_uid(c);
    if (uid == 0 || uid == (int64_t)geteuid())
        uid = -1;
    int rc = shm_create(b, uid);
    if (rc) {
        free(b);
        return dash__fail(c, rc, "cannot create a shared-memory buffer of %zu bytes%s: %s", size,
                          uid >= 0 ? " open to the daemon's user (an ACL entry on /dev/shm)" : "",
                          dash_strerror(rc));
    }
    if ((rc = dash__buffer_adopt(c, b)) != 0)
        return rc;
    *ret_buf = b;
    return 0;
}

int dash_buffer_free(struct dash_client *c, struct dash_buffer *b)
{
    if (!c || !b || b->owner != c)
        return DASH_EINVAL;
    if (b->users)
        return DASH_EBUSY;
    /* an id is only valid in the session that gave it, which REG_OK guarantees */
    if (b->reg == DASH__REG_OK)
        dash__unregister_detached(c, b->id);
    dash__buffer_destroy(c, b, 1);
    return 0;
}

int dash_shm_free(struct dash_client *c, struct dash_buffer *b)
{
    return dash_buffer_free(c, b);
}

void *dash_buffer_data(const struct dash_buffer *b)
{
    return b ? b->data : NULL;
}

size_t dash_buffer_size(const struct dash_buffer *b)
{
    return b ? b->size : 0;
}
