// SPDX-License-Identifier: BSD-3-Clause
/*
 * audit.c - see audit.h.
 */
#include "audit.h"

#include "log.h"

#include "proto/auditfile.h"
#include "kernels/digest/digest.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* After a write error, the writer tries the file again at most this often. */
#define AUDIT_RETRY_NS 1000000000ull

/* One encoded record waiting for the writer. */
struct pending {
    struct pending *next;
    uint64_t seq;
    uint64_t dropped_before; /* as encoded in the record */
    size_t len;
    unsigned char *frame;
};

struct audit {
    struct audit_config cfg;
    char *path;
    char *server_version;
    uint64_t log_id;
    int fd;            /* writer thread only (after open); -1 after a write error */
    uint64_t fd_bytes; /* the open file's size */
    /* Writer thread only: records that could not be written since the last header (the
     * next header says how many: lost_before), and whether the failure was logged. */
    uint64_t lost;
    uint64_t lost_dropped; /* the dropped_before of records lost: said by the next header */
    int failing;
    uint64_t retry_ns; /* after a write error, when to try the file again */
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* guarded by mu */
    struct pending *head, *tail;
    size_t queued_bytes;
    uint64_t next_seq;
    uint64_t dropped_pending; /* dropped since the last queued record */
    int reopen, stop;
    struct audit_stats stats;
};

int audit_parse_level(const char *s, enum audit_level *ret)
{
    static const char *names[] = {"off", "outputs", "all"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *ret = (enum audit_level)i;
            return 0;
        }
    return -1;
}

int audit_parse_sync(const char *s, enum audit_sync *ret)
{
    static const char *names[] = {"none", "batch", "every"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *ret = (enum audit_sync)i;
            return 0;
        }
    return -1;
}

const char *audit_level_name(enum audit_level l)
{
    return l == AUDIT_ALL ? "all" : l == AUDIT_OUTPUTS ? "outputs" : "off";
}

static uint64_t unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the file ---------------------------------------------------------------------------- */

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write frame bytes at the end; on failure cut the file back, so a failed write never
 * leaves half a frame before later ones. */
static int append(struct audit *a, const unsigned char *p, size_t n)
{
    int rc = write_all(a->fd, p, n);
    if (rc) {
        if (ftruncate(a->fd, (off_t)a->fd_bytes) != 0 || lseek(a->fd, 0, SEEK_END) < 0)
            log_error("audit: cannot cut %s back after a failed write: %s", a->path,
                      strerror(errno));
        return rc;
    }
    a->fd_bytes += n;
    return 0;
}

/* The header frame of a file whose first record is first_seq (malloc'd). Its counts
 * explain the whole gap before first_seq: lost_before the records that could not be
 * written, dropped_before those dropped (the writer behind) - `dropped` just before
 * first_seq, and those the lost records said (lost_dropped). */
static int encode_header(struct audit *a, uint64_t first_seq, uint64_t dropped,
                         unsigned char **ret_buf, size_t *ret_len)
{
    char host[256] = "";
    (void)gethostname(host, sizeof host - 1);
    Dash__AuditHeader h = DASH__AUDIT_HEADER__INIT;
    h.format_version = AUDITFILE_FORMAT_VERSION;
    h.log_id = a->log_id;
    h.first_seq = first_seq;
    h.server_version = a->server_version;
    h.hostname = host;
    h.has_created_unix_ns = 1;
    h.created_unix_ns = unix_ns();
    h.has_digest_version = 1;
    h.digest_version = DIGEST_VERSION;
    h.level = (char *)audit_level_name(a->cfg.level);
    h.has_lost_before = a->lost > 0;
    h.lost_before = a->lost;
    h.has_dropped_before = dropped + a->lost_dropped > 0;
    h.dropped_before = dropped + a->lost_dropped;
    Dash__AuditFrame f = DASH__AUDIT_FRAME__INIT;
    f.body_case = DASH__AUDIT_FRAME__BODY_HEADER;
    f.header = &h;
    return auditfile_encode(&f, ret_buf, ret_len);
}

/* A header, and with it (one write: both or neither) the first record if given; dropped:
 * records dropped just before first_seq (the first record's own count when given). */
static int write_header(struct audit *a, uint64_t first_seq, const struct pending *first,
                        uint64_t dropped)
{
    unsigned char *buf;
    size_t len;
    int rc = encode_header(a, first_seq, first ? first->dropped_before : dropped, &buf, &len);
    if (rc)
        return rc;
    if (first) {
        unsigned char *both = realloc(buf, len + first->len);
        if (!both) {
            free(buf);
            return -ENOMEM;
        }
        memcpy(both + len, first->frame, first->len);
        buf = both;
        len += first->len;
    }
    rc = append(a, buf, len);
    free(buf);
    if (!rc)
        a->lost = a->lost_dropped = 0;
    return rc;
}

/* Open the path for appending. A torn tail (a crash mid-write) is cut off so that new
 * frames follow valid ones; corruption inside the file is left for `dashctl audit
 * verify` to report. */
static int open_file(struct audit *a, char *why, size_t whylen)
{
    int fd = open(a->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot open %s: %s", a->path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        snprintf(why, whylen, "cannot stat %s: %s", a->path, strerror(e));
        return -e;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > 0) {
        void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            snprintf(why, whylen, "cannot read %s: %s", a->path, strerror(e));
            return -e;
        }
        struct auditfile_reader rd;
        auditfile_reader_init(&rd, map, (size_t)size);
        struct auditfile_item it;
        uint64_t torn_at = size;
        int first = 1, ours = 0;
        do {
            if (auditfile_read(&rd, &it) != 0)
                break;
            if (first)
                ours = it.kind == AUDITFILE_HEADER ||
                       (it.kind == AUDITFILE_TORN && auditfile_torn_header(map, (size_t)size));
            first = 0;
            if (it.kind == AUDITFILE_TORN)
                torn_at = it.offset;
            auditfile_item_free(&it);
        } while (ours && it.kind != AUDITFILE_END);
        auditfile_reader_free(&rd);
        munmap(map, (size_t)size);
        if (!ours) {
            /* Someone else's file (a typo in --audit, a path reused): appending frames to
             * it, or cutting a "torn tail" off it, would destroy it. */
            close(fd);
            snprintf(why, whylen, "%s is not an audit log (it does not start with an audit "
                     "header) and has %llu bytes: refusing to write to it; give --audit a new "
                     "path or an existing dashd audit log", a->path, (unsigned long long)size);
            return -EEXIST;
        }
        if (torn_at < size) {
            log_warn("audit: %s ends in a torn frame (%llu bytes at offset %llu, from an "
                     "interrupted write); cutting it off", a->path,
                     (unsigned long long)(size - torn_at), (unsigned long long)torn_at);
            if (ftruncate(fd, (off_t)torn_at) != 0) {
                int e = errno;
                close(fd);
                snprintf(why, whylen, "cannot cut the torn tail of %s: %s", a->path, strerror(e));
                return -e;
            }
            size = torn_at;
        }
    }
    a->fd = fd;
    a->fd_bytes = size;
    return 0;
}

/* With --audit-sync batch or every: make the path's directory entry durable - a file just
 * created, or renamed by a rotation, is otherwise not found after a crash, however often
 * its own data was synced. */
static void sync_dir(const struct audit *a)
{
    if (a->cfg.sync == AUDIT_SYNC_NONE)
        return;
    char *dir = strdup(a->path);
    if (!dir)
        return;
    char *slash = strrchr(dir, '/');
    const char *name = !slash ? "." : slash == dir ? "/" : (*slash = '\0', dir);
    int fd = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static void close_file(struct audit *a)
{
    if (a->fd >= 0) {
        (void)fsync(a->fd);
        close(a->fd);
        a->fd = -1;
    }
}

/* The writer could not write: from now on records are lost (counted) until a file can be
 * started again with a header that says how many. Logged once per failure, not once per
 * record or batch. */
static void write_failed(struct audit *a, const char *what, int rc)
{
    if (!a->failing)
        log_error("audit: %s %s failed (%s): records are lost until it can be written again; "
                  "the next header says how many", what, a->path, strerror(-rc));
    a->failing = 1;
}

/* Open the path again and start it with a header: after a rotation, a reopen or a write
 * error (`what` names which, for the log). A header that cannot be written whole is cut
 * off again (append) and the file closed, so that no record is ever written to a file
 * without its header. */
static int start_file(struct audit *a, uint64_t next_seq, const struct pending *first,
                      uint64_t dropped, const char *what)
{
    char why[512];
    int rc = open_file(a, why, sizeof why);
    if (rc) {
        if (!a->failing)
            log_error("audit: %s: %s", what, why);
        a->failing = 1;
        return rc;
    }
    uint64_t lost = a->lost;
    if ((rc = write_header(a, next_seq, first, dropped)) != 0) {
        write_failed(a, "writing a header to", rc);
        close_file(a);
        return rc;
    }
    if (a->cfg.sync == AUDIT_SYNC_EVERY) /* the header, and the record written with it */
        (void)fdatasync(a->fd);
    sync_dir(a); /* a new file (rotation, reopen after logrotate, resuming) */
    if (a->failing)
        log_warn("audit: writing to %s again; %llu records were lost before record %llu (its "
                 "header says so)", a->path, (unsigned long long)lost,
                 (unsigned long long)next_seq);
    a->failing = 0;
    return 0;
}

/* path -> path.1 -> ... -> path.keep (the oldest falls off), then a fresh path whose
 * header is for record next_seq, `dropped` records having been dropped just before it. */
static int rotate(struct audit *a, uint64_t next_seq, uint64_t dropped)
{
    size_t n = strlen(a->path) + 16;
    char *from = malloc(n), *to = malloc(n);
    if (!from || !to) {
        free(from);
        free(to);
        return -ENOMEM;
    }
    close_file(a);
    for (int k = a->cfg.keep; k >= 1; k--) {
        if (k == 1)
            snprintf(from, n, "%s", a->path);
        else
            snprintf(from, n, "%s.%d", a->path, k - 1);
        snprintf(to, n, "%s.%d", a->path, k);
        (void)rename(from, to);
    }
    free(from);
    free(to);
    a->stats.rotations++;
    return start_file(a, next_seq, NULL, dropped, "rotation");
}

static int reopen(struct audit *a, uint64_t next_seq, uint64_t dropped)
{
    close_file(a);
    log_info("audit: reopening %s", a->path);
    return start_file(a, next_seq, NULL, dropped, "reopen");
}

/* ---- the writer --------------------------------------------------------------------------- */

static void *writer_main(void *arg)
{
    struct audit *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop && !a->reopen)
            pthread_cond_wait(&a->cv, &a->mu);
        struct pending *batch = a->head;
        a->head = a->tail = NULL;
        a->queued_bytes = 0;
        int do_reopen = a->reopen;
        a->reopen = 0;
        const int stopping = a->stop;
        const uint64_t next_seq = a->next_seq;
        /* dropped after the last record queued: the next record says so, or (stopping) the
         * closing header; a header for next_seq must count them too */
        const uint64_t dropped_tail = a->dropped_pending;
        pthread_mutex_unlock(&a->mu);

        uint64_t written = 0, errors = 0;
        if (do_reopen)
            errors += reopen(a, batch ? batch->seq : next_seq,
                             batch ? batch->dropped_before : dropped_tail) != 0;
        while (batch) {
            struct pending *p = batch;
            batch = p->next;
            int rc;
            if (a->fd < 0 && unix_ns() >= a->retry_ns) {
                /* After a write error: the file again, its header written together with
                 * this record (a header alone may fit where the record does not: that
                 * would only pile up headers). At most once per AUDIT_RETRY_NS, since
                 * opening scans the file. */
                a->retry_ns = unix_ns() + AUDIT_RETRY_NS;
                if ((rc = start_file(a, p->seq, p, 0, "resuming after a write error")) == 0) {
                    written++;
                } else {
                    errors++;
                    a->lost++;
                    a->lost_dropped += p->dropped_before;
                }
                free(p->frame);
                free(p);
                continue;
            }
            if (a->fd >= 0 && a->cfg.max_bytes && a->fd_bytes + p->len > a->cfg.max_bytes &&
                a->fd_bytes > 0)
                errors += rotate(a, p->seq, p->dropped_before) != 0;
            rc = a->fd < 0 ? -EBADF : append(a, p->frame, p->len);
            if (rc) {
                errors++;
                a->lost++;
                a->lost_dropped += p->dropped_before;
                if (a->fd >= 0) {
                    /* the next record that can be written starts with a header */
                    write_failed(a, "writing a record to", rc);
                    close_file(a);
                    a->retry_ns = unix_ns() + AUDIT_RETRY_NS;
                }
            } else {
                written++;
                if (a->cfg.sync == AUDIT_SYNC_EVERY)
                    (void)fdatasync(a->fd);
            }
            free(p->frame);
            free(p);
        }
        if (stopping && (a->lost > 0 || dropped_tail > 0) && !batch) {
            /* The last records could not be written, or were dropped with no record after
             * them: one header of its own says both, if the file takes that much, so the
             * loss is not silent. */
            if (a->fd < 0)
                (void)start_file(a, next_seq, NULL, dropped_tail, "closing");
            else
                (void)write_header(a, next_seq, NULL, dropped_tail);
        }
        if (a->fd >= 0 && (a->cfg.sync == AUDIT_SYNC_BATCH || stopping))
            (void)fdatasync(a->fd);

        pthread_mutex_lock(&a->mu);
        a->stats.written += written;
        a->stats.write_errors += errors;
        if (stopping && !a->head)
            break;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ---- the interface ------------------------------------------------------------------------ */

int audit_open(const struct audit_config *cfg, struct audit **ret, char *why, size_t whylen)
{
    if (!cfg->path || !*cfg->path || cfg->level == AUDIT_OFF || cfg->keep < 1) {
        snprintf(why, whylen, "bad audit configuration");
        return -EINVAL;
    }
    struct audit *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(cfg->path)) ||
        !(a->server_version = strdup(cfg->server_version ? cfg->server_version : ""))) {
        if (a)
            free(a->path);
        free(a);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    a->cfg = *cfg;
    a->cfg.path = a->path;
    a->fd = -1;
    a->next_seq = 1;
    if (getrandom(&a->log_id, sizeof a->log_id, 0) != (ssize_t)sizeof a->log_id)
        a->log_id = unix_ns() ^ ((uint64_t)getpid() << 32);
    int rc = open_file(a, why, whylen);
    if (!rc && (rc = write_header(a, a->next_seq, NULL, 0)) != 0)
        snprintf(why, whylen, "cannot write to %s: %s", a->path, strerror(-rc));
    if (!rc && cfg->sync != AUDIT_SYNC_NONE) {
        (void)fdatasync(a->fd);
        sync_dir(a);
    }
    if (rc) {
        if (a->fd >= 0)
            close(a->fd);
        free(a->server_version);
        free(a->path);
        free(a);
        return rc;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->writer, NULL, writer_main, a) != 0) {
        snprintf(why, whylen, "cannot start the audit writer thread");
        close(a->fd);
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        free(a->server_version);
        free(a->path);
        free(a);
        return -EAGAIN;
    }
    log_info("audit: writing %s (level %s, log id %016llx)", a->path,
             audit_level_name(cfg->level), (unsigned long long)a->log_id);
    *ret = a;
    return 0;
}

void audit_submit(struct audit *a, Dash__AuditRecord *r)
{
    Dash__AuditFrame f = DASH__AUDIT_FRAME__INIT;
    f.body_case = DASH__AUDIT_FRAME__BODY_RECORD;
    f.record = r;
    pthread_mutex_lock(&a->mu);
    r->log_id = a->log_id;
    r->seq = a->next_seq++;
    r->has_dropped_before = a->dropped_pending > 0;
    r->dropped_before = a->dropped_pending;
    struct pending *p = NULL;
    unsigned char *frame = NULL;
    size_t len = 0;
    const size_t queue_max = a->cfg.queue_max ? a->cfg.queue_max : AUDIT_QUEUE_MAX;
    int rc = a->queued_bytes >= queue_max ? -ENOSPC : auditfile_encode(&f, &frame, &len);
    if (!rc && !(p = malloc(sizeof *p))) {
        free(frame);
        rc = -ENOMEM;
    }
    if (rc) {
        /* The gap stays visible: the next record written says how many went missing. */
        if (a->stats.dropped++ == 0 || rc != -ENOSPC)
            log_error("audit: record %llu dropped (%s)", (unsigned long long)r->seq,
                      rc == -ENOSPC ? "the writer is behind: queue full" : strerror(-rc));
        a->dropped_pending++;
        pthread_mutex_unlock(&a->mu);
        return;
    }
    a->dropped_pending = 0;
    p->next = NULL;
    p->seq = r->seq;
    p->dropped_before = r->dropped_before;
    p->len = len;
    p->frame = frame;
    if (a->tail)
        a->tail->next = p;
    else
        a->head = p;
    a->tail = p;
    a->queued_bytes += len;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void audit_reopen(struct audit *a)
{
    pthread_mutex_lock(&a->mu);
    a->reopen = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void audit_close(struct audit *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->writer, NULL);
    if (a->fd >= 0) {
        (void)fsync(a->fd);
        close(a->fd);
    }
    log_info("audit: closed %s: %llu records written, %llu dropped, %llu write errors",
             a->path, (unsigned long long)a->stats.written, (unsigned long long)a->stats.dropped,
             (unsigned long long)a->stats.write_errors);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->server_version);
    free(a->path);
    free(a);
}

const char *audit_path(const struct audit *a)
{
    return a->path;
}

enum audit_level audit_level(const struct audit *a)
{
    return a ? a->cfg.level : AUDIT_OFF;
}

void audit_get_stats(struct audit *a, struct audit_stats *ret)
{
    pthread_mutex_lock(&a->mu);
    *ret = a->stats;
    pthread_mutex_unlock(&a->mu);
}
