// SPDX-License-Identifier: BSD-3-Clause
/*
 * audit.h - dashd's audit log: one record per Forward/Backward, appended by a writer
 * thread to a file of CRC-checked frames (proto/auditfile.h; docs/audit.md).
 *
 * The request path only encodes and queues (audit_submit): it never waits for the disk.
 * If the disk falls behind by more than AUDIT_QUEUE_MAX bytes, records are dropped and
 * counted, and the next record written says how many (dropped_before), so the sequence
 * gap is explained instead of silent; drops with no record after them (at the very end)
 * are said by the header the log closes with (dropped_before). --audit-sync chooses when
 * the writer fsyncs: none (the kernel decides), batch (after every batch it drains; the
 * default), every (after every record, and the directory whenever a file is created or
 * renamed: a record synced is a record found after a crash). A crash loses at most what
 * was not yet synced, and its torn last frame never reads as a record (CRC); at start, a
 * torn tail left by a crash is cut off.
 *
 * Files: the first frame of every file is a header (log id, first sequence number). Size
 * rotation renames path -> path.1 -> ... -> path.keep; SIGHUP (audit_reopen) reopens the
 * path for logrotate. Sequence numbers continue across files of one daemon run; a new
 * run gets a new random log id, so records spliced in from another log are caught.
 */
#ifndef DASHD_AUDIT_H
#define DASHD_AUDIT_H

#include "proto/audit.pb-c.h"

#include <stddef.h>
#include <stdint.h>

#define AUDIT_QUEUE_MAX ((size_t)64 << 20)

enum audit_level { AUDIT_OFF, AUDIT_OUTPUTS, AUDIT_ALL };
enum audit_sync { AUDIT_SYNC_NONE, AUDIT_SYNC_BATCH, AUDIT_SYNC_EVERY };

struct audit_config {
    const char *path;
    enum audit_level level; /* OUTPUTS or ALL (OFF: do not open a log) */
    enum audit_sync sync;
    uint64_t max_bytes;     /* rotate before a file would grow past this; 0: never */
    int keep;               /* rotated files kept (path.1 .. path.keep), >= 1 */
    const char *server_version;
    size_t queue_max;       /* bytes queued for the writer before records drop; 0:
                             * AUDIT_QUEUE_MAX (tests set less) */
};

/* "off"/"outputs"/"all" and "none"/"batch"/"every": 0 and *ret, or -1. */
int audit_parse_level(const char *s, enum audit_level *ret);
int audit_parse_sync(const char *s, enum audit_sync *ret);
const char *audit_level_name(enum audit_level l);

struct audit;

/* Open (create, or append to) cfg->path: a torn tail is cut off (and logged), a header is
 * written, the writer thread starts. 0 and *ret, or -errno with the reason in why. */
int audit_open(const struct audit_config *cfg, struct audit **ret, char *why, size_t whylen);

/* Any thread: set r's log_id, seq (and dropped_before), encode it and queue it for the
 * writer. r is not kept. */
void audit_submit(struct audit *a, Dash__AuditRecord *r);

/* Have the writer close and reopen the path before its next write (logrotate). */
void audit_reopen(struct audit *a);

/* Write what is queued, fsync, stop the writer, free. Accepts NULL. */
void audit_close(struct audit *a);

enum audit_level audit_level(const struct audit *a);

/* The log's path. */
const char *audit_path(const struct audit *a);

struct audit_stats {
    uint64_t written, dropped, write_errors, rotations;
};

/* Any thread. */
void audit_get_stats(struct audit *a, struct audit_stats *ret);

#endif
