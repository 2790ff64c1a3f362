// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_audit.h - what the files of `dashctl audit` share: dashd's audit logs read into
 * memory (ctl_audit.c), record comparison and the diff command (ctl_audit_diff.c).
 *
 * A log is the records and headers of one or more files read in order, with the problems
 * that verify reports (torn tails, corrupt stretches, sequence gaps). Records point into
 * their unpacked frames, which the log owns until ctl__audit_log_free().
 */
#ifndef DASH_CTL_AUDIT_H
#define DASH_CTL_AUDIT_H

#include "proto/audit.pb-c.h"

#include <stddef.h>
#include <stdint.h>

/* A problem verify reports. */
struct ctl_audit_problem {
    const char *file;
    uint64_t offset, length;
    int torn;
    char what[200];
};

struct ctl_audit_rec {
    Dash__AuditRecord *r; /* owned by its frame */
    Dash__AuditFrame *frame;
    const char *file;
    uint64_t offset;
};

struct ctl_audit_log {
    struct ctl_audit_rec *recs;
    size_t n, cap;
    Dash__AuditFrame **headers;
    size_t *header_before; /* header i comes just before record header_before[i] */
    size_t n_headers, cap_headers;
    struct ctl_audit_problem *problems;
    size_t n_problems, cap_problems;
    int oom;     /* a problem could not be recorded: out of memory */
    char *names; /* ctl__audit_read_list's copy of its file names, or NULL */
    /* verify state */
    int have_header;
    uint64_t log_id, expect_seq;
};

/* Read paths[0..n) in order into *L (zeroed first) as one log. Returns 0, or
 * CTL_EXIT_USAGE when a file cannot be read (reported), or CTL_EXIT_FAIL out of memory
 * (reported). *L must be freed with ctl__audit_log_free() in every case. */
int ctl__audit_read_files(struct ctl_audit_log *L, int n, char **paths);

/* The same for one comma-separated list of files ("PATH.1,PATH"). */
int ctl__audit_read_list(struct ctl_audit_log *L, const char *list);

void ctl__audit_log_free(struct ctl_audit_log *L);

/* Report "out of memory" on stderr; returns CTL_EXIT_FAIL. */
int ctl__audit_out_of_memory(void);

/* Room for element n of *arr (capacity *cap, size bytes each), doubling as needed: 0, or
 * -1 when out of memory (*arr and *cap unchanged). */
int ctl__audit_reserve(void **arr, size_t *cap, size_t n, size_t size);

/* The record's schedule by name ("-" when it has none). */
const char *ctl__audit_sched_name(const Dash__AuditRecord *r);

/* s, or "" for NULL. */
const char *ctl__audit_str(const char *s);

/* A record as one line of text on stdout (what `dump` prints), newline included. */
void ctl__audit_dump_text(const Dash__AuditRecord *r);

/* Whether every tensor of a list carries a digest (level "all" for inputs). */
int ctl__audit_all_digested(Dash__AuditTensor **t, size_t n);

/* Compare tensor lists by name, shape and digest; describe the differences into buf.
 * -1: not comparable (digests not recorded on both sides), 0 same, 1 different. */
int ctl__audit_cmp_tensors(Dash__AuditTensor **a, size_t na, Dash__AuditTensor **b, size_t nb,
                           char *buf, size_t len);

/* Whether two records' parameters differ (dtype, mask, scale, schedule, window, softcap,
 * batch_invariant, result code): 1 with the difference described in buf, else 0. */
int ctl__audit_params_differ(const Dash__AuditRecord *a, const Dash__AuditRecord *b, char *buf,
                             size_t len);

/* Whether two records were computed by other kernel builds or on other devices: 1 with
 * both described in buf, else 0. Context, not a divergence: the determinism contract
 * (docs/design.md) makes the bits independent of the device, its SM count and the engine
 * threads, which the device description names, so equal digests are the same bits. */
int ctl__audit_where_differs(const Dash__AuditRecord *a, const Dash__AuditRecord *b, char *buf,
                             size_t len);

/* `dashctl audit diff` (ctl_audit_diff.c); argv[0] is "diff". Returns an exit status. */
int ctl__audit_diff(int argc, char **argv);

#endif
