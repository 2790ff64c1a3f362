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

/* One encoded record waiting for the writer. */
struct pending {
    struct pending *next;
    uint64_t seq;
    size_t len;
    unsigned char *frame;
};

struct audit {
    struct audit_config cfg;
    char *path;
    char *server_version;
    uint64_t log_id;
    int fd;            /* writer thread only (after open) */
    uint64_t fd_bytes; /* the open file's size */
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

static int write_header(struct audit *a, uint64_t first_seq)
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
    Dash__AuditFrame f = DASH__AUDIT_FRAME__INIT;
    f.body_case = DASH__AUDIT_FRAME__BODY_HEADER;
    f.header = &h;
    unsigned char *buf;
    size_t len;
    int rc = auditfile_encode(&f, &buf, &len);
    if (!rc) {
        rc = append(a, buf, len);
        free(buf);
    }
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
        size_t pos = 0;
        struct auditfile_item it;
        uint64_t torn_at = size;
        do {
            if (auditfile_next(map, (size_t)size, &pos, &it) != 0)
                break;
            if (it.kind == AUDITFILE_TORN)
                torn_at = it.offset;
            auditfile_item_free(&it);
        } while (it.kind != AUDITFILE_END);
        munmap(map, (size_t)size);
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

static void close_file(struct audit *a)
{
    if (a->fd >= 0) {
        (void)fsync(a->fd);
        close(a->fd);
        a->fd = -1;
    }
}

/* Open the path again and start it with a header: after a rotation or a reopen (`what`
 * names which, for the log). */
static int start_file(struct audit *a, uint64_t next_seq, const char *what)
{
    char why[256];
    int rc = open_file(a, why, sizeof why);
    if (rc) {
        log_error("audit: %s: %s", what, why);
        return rc;
    }
    return write_header(a, next_seq);
}

/* path -> path.1 -> ... -> path.keep (the oldest falls off), then a fresh path. */
static int rotate(struct audit *a, uint64_t next_seq)
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
    return start_file(a, next_seq, "rotation");
}

static int reopen(struct audit *a, uint64_t next_seq)
{
    close_file(a);
    log_info("audit: reopening %s", a->path);
    return start_file(a, next_seq, "reopen");
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
        pthread_mutex_unlock(&a->mu);

        uint64_t written = 0, errors = 0;
        if (do_reopen)
            errors += reopen(a, batch ? batch->seq : next_seq) != 0;
        while (batch) {
            struct pending *p = batch;
            batch = p->next;
            if (a->fd >= 0 && a->cfg.max_bytes && a->fd_bytes + p->len > a->cfg.max_bytes &&
                a->fd_bytes > 0)
                errors += rotate(a, p->seq) != 0;
            if (a->fd < 0 || append(a, p->frame, p->len) != 0) {
                errors++;
            } else {
                written++;
                if (a->cfg.sync == AUDIT_SYNC_EVERY)
                    (void)fdatasync(a->fd);
            }
            free(p->frame);
            free(p);
        }
        if (a->fd >= 0 && (a->cfg.sync == AUDIT_SYNC_BATCH || stopping))
            (void)fdatasync(a->fd);
        if (errors)
            log_error("audit: %llu records or headers could not be written to %s",
                      (unsigned long long)errors, a->path);

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
    if (!rc && (rc = write_header(a, a->next_seq)) != 0)
        snprintf(why, whylen, "cannot write to %s: %s", a->path, strerror(-rc));
    if (!rc && cfg->sync != AUDIT_SYNC_NONE)
        (void)fdatasync(a->fd);
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
    int rc = a->queued_bytes >= AUDIT_QUEUE_MAX ? -ENOSPC : auditfile_encode(&f, &frame, &len);
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
