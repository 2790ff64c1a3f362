// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_audit.c - `dashctl audit`: read dashd's audit logs (docs/audit.md) offline.
 *
 *   dump     every header and record, as text or JSON lines
 *   verify   framing, CRCs, log ids and sequence numbers; exactly where a torn tail or a
 *            corrupt stretch begins
 *   diff     two runs aligned record by record; the first divergent one, and whether its
 *            inputs differed or only its outputs
 *   summary  counts and time per op and schedule, failures, and divergences: ops with
 *            the same parameters and input digests whose outputs differ
 *
 * Several files given in order (path.2 path.1 path, after rotation) are read as one log.
 * Files are mapped read-only; nothing here writes to them.
 */
#include "client/dashctl/ctl.h"
#include "client/dashctl/ctl_audit.h"

#include "proto/auditfile.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CTL_EXIT_TORN 3 /* verify: valid up to a torn tail (an interrupted last write) */

static const char usage_text[] =
    "usage: dashctl audit dump [--json] FILE...\n"
    "       dashctl audit verify FILE...\n"
    "       dashctl audit diff [--run-a TAG] [--run-b TAG] [--ranks] A B\n"
    "                          (A, B: FILE[,FILE...], or two directories of logs)\n"
    "       dashctl audit summary FILE...\n"
    "\n"
    "Read dashd's audit logs (dashd --audit PATH). Several files are one log read in the\n"
    "order given: after rotation, PATH.2 PATH.1 PATH.\n"
    "\n"
    "  dump      every header and record: one line of text each, or --json (one JSON object\n"
    "            per line; digests as 16 hex digits)\n"
    "  verify    check frames, CRCs, log ids and sequence numbers; print every problem with\n"
    "            its byte offset. Exit 0 clean, 1 corrupt/spliced/missing records, 3 valid\n"
    "            up to a torn tail (a write cut short by a crash)\n"
    "  diff      align the records of A and B by client name, step, label, op and occurrence\n"
    "            (optionally only run tag TAG on each side) and print the first one whose\n"
    "            inputs or outputs differ; a side may list several files, comma-separated,\n"
    "            oldest first (a rotated log). Two directories (or --ranks): rank by rank,\n"
    "            each rank's records of a step aligned by their index within the step; names\n"
    "            each rank's first difference, then the first rank, step and record (layer)\n"
    "            that diverged. Exit 0 identical, 1 different, 2 logs of two digest\n"
    "            versions or no records on either side (not compared)\n"
    "  summary   per op and schedule: count, errors, total and mean time; divergences (same\n"
    "            parameters and input digests, different outputs: needs --audit-level all)\n"
    "\n"
    "Exit status 2: bad command, option or file.\n";

/* ---- reading ------------------------------------------------------------------------- */

int ctl__audit_reserve(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *q = realloc(*arr, c * size);
    if (!q)
        return -1;
    *arr = q;
    *cap = c;
    return 0;
}

int ctl__audit_out_of_memory(void)
{
    fprintf(stderr, "dashctl audit: out of memory\n");
    return CTL_EXIT_FAIL;
}

__attribute__((format(printf, 6, 7))) static void problem(struct ctl_audit_log *L, const char *file,
                                                          uint64_t off, uint64_t len, int torn,
                                                          const char *fmt, ...)
{
    if (ctl__audit_reserve((void **)&L->problems, &L->cap_problems, L->n_problems,
                           sizeof *L->problems)) {
        L->oom = 1;
        return;
    }
    struct ctl_audit_problem *p = &L->problems[L->n_problems++];
    p->file = file;
    p->offset = off;
    p->length = len;
    p->torn = torn;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
}

/* The log id / sequence rules, applied to each frame in order. */
static void check_header(struct ctl_audit_log *L, const char *file, uint64_t off,
                         const Dash__AuditHeader *h)
{
    if (h->format_version != AUDITFILE_FORMAT_VERSION)
        problem(L, file, off, 0, 0, "header of format version %u; this dashctl reads %u",
                h->format_version, AUDITFILE_FORMAT_VERSION);
    const uint64_t lost = (h->has_lost_before ? h->lost_before : 0),
                   dropped = h->has_dropped_before ? h->dropped_before : 0;
    const char *why = !dropped ? "were lost: dashd could not write them (disk full?; said so in "
                                 "this header)"
                      : !lost  ? "were dropped by dashd (its writer fell behind; said so in the "
                                 "header it closed the log with)"
                               : "were lost or dropped: dashd could not write some (disk "
                                 "full?) and its writer fell behind on others (said so in this "
                                 "header)";
    if (L->have_header && h->log_id == L->log_id && h->first_seq != L->expect_seq) {
        if (h->first_seq > L->expect_seq && h->first_seq - L->expect_seq == lost + dropped)
            problem(L, file, off, 0, 0, "records %" PRIu64 "..%" PRIu64 " %s", L->expect_seq,
                    h->first_seq - 1, why);
        else
            problem(L, file, off, 0, 0, "header says the next record is %" PRIu64 ", but %"
                    PRIu64 " was expected (records missing between files?)", h->first_seq,
                    L->expect_seq);
    } else if ((lost || dropped) && !L->have_header) {
        problem(L, file, off, 0, 0, "%" PRIu64 " records before %" PRIu64 " %s", lost + dropped,
                h->first_seq, why);
    }
    L->have_header = 1;
    L->log_id = h->log_id;
    L->expect_seq = h->first_seq;
}

static void check_record(struct ctl_audit_log *L, const char *file, uint64_t off,
                         const Dash__AuditRecord *r)
{
    if (!L->have_header) {
        problem(L, file, off, 0, 0, "record %" PRIu64 " before any header", r->seq);
        return;
    }
    if (r->log_id != L->log_id) {
        problem(L, file, off, 0, 0, "record %" PRIu64 " belongs to log %016" PRIx64
                ", not this log %016" PRIx64 " (spliced in from another log)", r->seq,
                r->log_id, L->log_id);
        return;
    }
    if (r->seq != L->expect_seq) {
        uint64_t dropped = r->has_dropped_before ? r->dropped_before : 0;
        if (r->seq > L->expect_seq && r->seq - L->expect_seq == dropped)
            problem(L, file, off, 0, 0, "records %" PRIu64 "..%" PRIu64 " were dropped by dashd "
                    "(its writer fell behind; said so in record %" PRIu64 ")", L->expect_seq,
                    r->seq - 1, r->seq);
        else if (r->seq > L->expect_seq)
            problem(L, file, off, 0, 0, "records %" PRIu64 "..%" PRIu64 " are missing",
                    L->expect_seq, r->seq - 1);
        else
            problem(L, file, off, 0, 0, "record %" PRIu64 " out of order: %" PRIu64
                    " was expected (a duplicate, or spliced in)", r->seq, L->expect_seq);
    }
    L->expect_seq = r->seq + 1;
}

/* Read one file into L (frames are unpacked copies: the bytes go at the end). Read, not
 * mapped: dashd cuts its live log back after a failed write (and a torn tail at start),
 * and a mapping's pages past the new end would kill dashctl with SIGBUS; read() gives the
 * bytes there were, a frame cut short among them being reported as a torn tail. Returns
 * 0, or CTL_EXIT_USAGE when the file cannot be read. */
static int read_file(struct ctl_audit_log *L, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ctl__usage_error("audit", "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return ctl__usage_error("audit", "cannot stat %s: %s", path, strerror(errno));
    }
    size_t size = 0, cap = (size_t)st.st_size;
    unsigned char *data = cap ? malloc(cap) : NULL;
    if (cap && !data) {
        close(fd);
        return ctl__audit_out_of_memory();
    }
    while (size < cap) { /* up to the size seen: what is appended meanwhile waits for the next run */
        ssize_t n = read(fd, data + size, cap - size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            free(data);
            return ctl__usage_error("audit", "cannot read %s: %s", path, strerror(e));
        }
        if (n == 0) /* cut back while read: what there was */
            break;
        size += (size_t)n;
    }
    close(fd);
    struct auditfile_reader rd;
    auditfile_reader_init(&rd, data, size);
    for (;;) {
        struct auditfile_item it;
        if (auditfile_read(&rd, &it) != 0)
            L->oom = 1;
        if (L->oom || it.kind == AUDITFILE_END)
            break;
        switch (it.kind) {
        case AUDITFILE_HEADER:
            check_header(L, path, it.offset, it.frame->header);
            if (L->n_headers == L->cap_headers) {
                size_t cap = L->cap_headers; /* both arrays grow to the same capacity */
                if (ctl__audit_reserve((void **)&L->headers, &cap, L->n_headers,
                                       sizeof *L->headers) ||
                    ctl__audit_reserve((void **)&L->header_before, &L->cap_headers, L->n_headers,
                                       sizeof *L->header_before)) {
                    auditfile_item_free(&it);
                    L->oom = 1;
                    break;
                }
            }
            L->header_before[L->n_headers] = L->n;
            L->headers[L->n_headers++] = it.frame;
            break;
        case AUDITFILE_RECORD:
            check_record(L, path, it.offset, it.frame->record);
            if (ctl__audit_reserve((void **)&L->recs, &L->cap, L->n, sizeof *L->recs)) {
                auditfile_item_free(&it);
                L->oom = 1;
                break;
            }
            L->recs[L->n++] = (struct ctl_audit_rec){it.frame->record, it.frame, path, it.offset};
            break;
        case AUDITFILE_CORRUPT:
            problem(L, path, it.offset, it.length, 0, "%" PRIu64 " corrupt bytes (bad CRC, "
                    "length or contents); valid frames resume at offset %" PRIu64,
                    it.length, it.offset + it.length);
            break;
        case AUDITFILE_TORN:
            if (it.offset == 0) /* nothing valid before it: say so, not "valid up to 0" */
                problem(L, path, 0, it.length, 1, "the file's %" PRIu64 " bytes hold no "
                        "complete frame: not a dashd audit log, or its first write was cut "
                        "short", it.length);
            else
                problem(L, path, it.offset, it.length, 1, "torn tail: the last %" PRIu64
                        " bytes hold no complete frame (a write cut short, e.g. by a crash); "
                        "everything before offset %" PRIu64 " is valid", it.length, it.offset);
            break;
        default:
            break;
        }
    }
    auditfile_reader_free(&rd);
    free(data);
    return L->oom ? ctl__audit_out_of_memory() : 0;
}

int ctl__audit_read_files(struct ctl_audit_log *L, int n, char **paths)
{
    memset(L, 0, sizeof *L);
    for (int i = 0; i < n; i++) {
        int rc = read_file(L, paths[i]);
        if (rc)
            return rc;
    }
    return 0;
}

/* A side of `diff`: one file, or several separated by commas read in that order (the
 * files of a rotated log, oldest first). */
int ctl__audit_read_list(struct ctl_audit_log *L, const char *list)
{
    /* every file of the list: one left out would leave its records uncompared */
    size_t max = 1;
    for (const char *c = list; *c; c++)
        max += *c == ',';
    char *copy = strdup(list), *save = NULL;
    char **paths = malloc(max * sizeof *paths);
    int n = 0;
    if (!copy || !paths || max > INT_MAX) {
        free(copy);
        free(paths);
        memset(L, 0, sizeof *L);
        return ctl__audit_out_of_memory();
    }
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        paths[n++] = t;
    int rc;
    if (n) {
        rc = ctl__audit_read_files(L, n, paths);
    } else {
        memset(L, 0, sizeof *L);
        rc = ctl__usage_error("audit", "an empty file list");
    }
    free(paths);
    L->names = copy; /* the problems point into it: it goes with the log */
    return rc;
}

void ctl__audit_log_free(struct ctl_audit_log *L)
{
    for (size_t i = 0; i < L->n; i++)
        dash__audit_frame__free_unpacked(L->recs[i].frame, NULL);
    for (size_t i = 0; i < L->n_headers; i++)
        dash__audit_frame__free_unpacked(L->headers[i], NULL);
    free(L->recs);
    free(L->headers);
    free(L->header_before);
    free(L->problems);
    free(L->names);
}

/* ---- names --------------------------------------------------------------------------- */

const char *ctl__audit_sched_name(const Dash__AuditRecord *r)
{
    static const char *names[] = {"auto", "atomic", "ascending", "descending", "spt", "shift"};
    if (!r->has_schedule)
        return "-";
    return (unsigned)r->schedule < 6 ? names[r->schedule] : "?";
}

static const char *dtype_name(const Dash__AuditRecord *r)
{
    return !r->has_dtype                  ? "-"
           : r->dtype == DASH__DTYPE__F32 ? "f32"
           : r->dtype == DASH__DTYPE__F16 ? "f16"
           : r->dtype == DASH__DTYPE__F64 ? "f64"
                                          : "bf16";
}

const char *ctl__audit_str(const char *s)
{
    return s ? s : "";
}

static void fmt_time(char *buf, size_t len, uint64_t unix_ns)
{
    time_t t = (time_t)(unix_ns / 1000000000u);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%06uZ", (unsigned)(unix_ns % 1000000000u / 1000u));
}

/* ---- dump ---------------------------------------------------------------------------- */

static void json_tensors(const char *key, Dash__AuditTensor **t, size_t n)
{
    printf(",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"name\":", i ? "," : "");
        ctl__json_string(ctl__audit_str(t[i]->name));
        printf(",\"shape\":[");
        for (size_t k = 0; k < t[i]->n_shape; k++)
            printf("%s%" PRId64, k ? "," : "", t[i]->shape[k]);
        printf("]");
        if (t[i]->has_digest)
            printf(",\"digest\":\"%016" PRIx64 "\"", t[i]->digest);
        printf("}");
    }
    printf("]");
}

static void dump_json_record(const Dash__AuditRecord *r)
{
    printf("{\"type\":\"record\",\"log_id\":\"%016" PRIx64 "\",\"seq\":%" PRIu64, r->log_id,
           r->seq);
    char tbuf[64];
    fmt_time(tbuf, sizeof tbuf, r->wall_unix_ns);
    printf(",\"time\":\"%s\",\"session\":%" PRIu64 ",\"pid\":%u", tbuf, r->session_id, r->pid);
    if (r->has_uid)
        printf(",\"uid\":%" PRId64, r->uid);
    if (r->has_peer_pid) /* the kernel's word; pid, client and run_tag are the client's */
        printf(",\"peer_pid\":%" PRId64, r->peer_pid);
    printf(",\"client\":");
    ctl__json_string(ctl__audit_str(r->client_name));
    printf(",\"run_tag\":");
    ctl__json_string(ctl__audit_str(r->run_tag));
    if (r->has_rank && r->has_world_size)
        printf(",\"rank\":%u,\"world_size\":%u", r->rank, r->world_size);
    if (r->has_step)
        printf(",\"step\":%" PRIu64, r->step);
    printf(",\"label\":");
    ctl__json_string(ctl__audit_str(r->label));
    printf(",\"request_id\":%" PRIu64 ",\"op\":", r->request_id);
    ctl__json_string(ctl__audit_str(r->op));
    printf(",\"dtype\":\"%s\",\"mask\":\"%s\",\"scale\":%.9g,\"schedule\":\"%s\"", dtype_name(r),
           r->mask == DASH__MASK__CAUSAL ? "causal" : "full", (double)r->scale,
           ctl__audit_sched_name(r));
    if (r->has_wave)
        printf(",\"wave\":%d,\"block_m\":%d,\"block_n\":%d", r->wave, r->block_m, r->block_n);
    if (r->has_window_left)
        printf(",\"window\":[%d,%d]", r->window_left, r->window_right);
    if (r->has_softcap)
        printf(",\"softcap\":%.9g", (double)r->softcap);
    if (r->has_varlen_batch)
        printf(",\"varlen\":{\"batch\":%u,\"max_seqlen_q\":%d,\"max_seqlen_k\":%d,"
               "\"cu_seqlens_q\":\"%016" PRIx64 "\",\"cu_seqlens_k\":\"%016" PRIx64 "\"}",
               r->varlen_batch, r->max_seqlen_q, r->max_seqlen_k, r->cu_seqlens_q_digest,
               r->cu_seqlens_k_digest);
    if (r->has_batch_invariant && r->batch_invariant)
        printf(",\"batch_invariant\":true");
    printf(",\"backend\":");
    ctl__json_string(ctl__audit_str(r->backend));
    printf(",\"kernel_build\":");
    ctl__json_string(ctl__audit_str(r->kernel_build));
    printf(",\"device\":");
    ctl__json_string(ctl__audit_str(r->device));
    printf(",\"sm_count\":%d", r->sm_count);
    json_tensors("inputs", r->inputs, r->n_inputs);
    json_tensors("outputs", r->outputs, r->n_outputs);
    printf(",\"duration_us\":%" PRIu64 ",\"code\":%d", r->duration_us, r->code);
    if (r->has_dropped_before)
        printf(",\"dropped_before\":%" PRIu64, r->dropped_before);
    printf("}\n");
}

static void dump_json_header(const Dash__AuditHeader *h)
{
    char tbuf[64];
    fmt_time(tbuf, sizeof tbuf, h->created_unix_ns);
    printf("{\"type\":\"header\",\"format_version\":%u,\"log_id\":\"%016" PRIx64
           "\",\"first_seq\":%" PRIu64 ",\"created\":\"%s\",\"server_version\":",
           h->format_version, h->log_id, h->first_seq, tbuf);
    ctl__json_string(ctl__audit_str(h->server_version));
    printf(",\"hostname\":");
    ctl__json_string(ctl__audit_str(h->hostname));
    printf(",\"digest_version\":%u,\"level\":", h->digest_version);
    ctl__json_string(ctl__audit_str(h->level));
    if (h->has_lost_before)
        printf(",\"lost_before\":%" PRIu64, h->lost_before);
    if (h->has_dropped_before)
        printf(",\"dropped_before\":%" PRIu64, h->dropped_before);
    printf("}\n");
}

static void text_tensors(const char *what, Dash__AuditTensor **t, size_t n)
{
    if (!n)
        return;
    printf(" %s", what);
    for (size_t i = 0; i < n; i++) {
        if (t[i]->has_digest)
            printf(" %s=%016" PRIx64, ctl__audit_str(t[i]->name), t[i]->digest);
        else
            printf(" %s=-", ctl__audit_str(t[i]->name));
    }
}

void ctl__audit_dump_text(const Dash__AuditRecord *r)
{
    char tbuf[64], name[40], tag[40], label[48];
    fmt_time(tbuf, sizeof tbuf, r->wall_unix_ns);
    ctl__text(name, sizeof name, ctl__audit_str(r->client_name), 24);
    ctl__text(tag, sizeof tag, ctl__audit_str(r->run_tag), 24);
    ctl__text(label, sizeof label, ctl__audit_str(r->label), 32);
    printf("#%" PRIu64 " %s %s/%u run=%s", r->seq, tbuf, name, r->pid, tag[0] ? tag : "-");
    if (r->has_rank && r->has_world_size)
        printf(" rank=%u/%u", r->rank, r->world_size);
    if (r->has_step)
        printf(" step=%" PRIu64, r->step);
    if (label[0])
        printf(" label=%s", label);
    printf(" %s %s %s %s", ctl__audit_str(r->op), dtype_name(r),
           r->mask == DASH__MASK__CAUSAL ? "causal" : "full", ctl__audit_sched_name(r));
    if (r->has_wave)
        printf("(W=%d %dx%d)", r->wave, r->block_m, r->block_n);
    if (r->has_window_left)
        printf(" window=(%d,%d)", r->window_left, r->window_right);
    if (r->has_softcap)
        printf(" softcap=%g", (double)r->softcap);
    if (r->has_varlen_batch)
        printf(" varlen=%u cu_q=%016" PRIx64 " cu_k=%016" PRIx64, r->varlen_batch,
               r->cu_seqlens_q_digest, r->cu_seqlens_k_digest);
    if (r->n_outputs && r->outputs[0]->n_shape == 4) {
        const int64_t *s = r->outputs[0]->shape;
        printf(" %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64, s[0], s[1], s[2], s[3]);
    }
    printf(" %s %" PRIu64 "us", ctl__audit_str(r->backend), r->duration_us);
    if (r->code)
        printf(" code=%d", r->code);
    text_tensors("in:", r->inputs, r->n_inputs);
    text_tensors("out:", r->outputs, r->n_outputs);
    if (r->has_dropped_before)
        printf(" (%" PRIu64 " records dropped before this one)", r->dropped_before);
    printf("\n");
}

static int cmd_dump(int argc, char **argv)
{
    int json = 0, i = 1;
    if (i < argc && !strcmp(argv[i], "--json")) {
        json = 1;
        i++;
    }
    if (i >= argc)
        return ctl__usage_error("audit", "dump needs at least one FILE");
    for (; i < argc; i++) {
        struct ctl_audit_log L;
        int rc = ctl__audit_read_files(&L, 1, &argv[i]);
        if (rc) {
            ctl__audit_log_free(&L);
            return rc;
        }
        /* in file order: headers and records interleaved as written */
        size_t h = 0, r = 0;
        while (h < L.n_headers || r < L.n) {
            if (h < L.n_headers && L.header_before[h] <= r) {
                if (json)
                    dump_json_header(L.headers[h]->header);
                else {
                    const Dash__AuditHeader *hd = L.headers[h]->header;
                    printf("# header: log %016" PRIx64 " from record %" PRIu64 ", %s on %s, "
                           "level %s, digest v%u", hd->log_id, hd->first_seq,
                           ctl__audit_str(hd->server_version), ctl__audit_str(hd->hostname),
                           ctl__audit_str(hd->level), hd->digest_version);
                    if (hd->has_lost_before)
                        printf(" (%" PRIu64 " records lost before it)", hd->lost_before);
                    if (hd->has_dropped_before)
                        printf(" (%" PRIu64 " records dropped before it)", hd->dropped_before);
                    printf("\n");
                }
                h++;
                continue;
            }
            if (json)
                dump_json_record(L.recs[r].r);
            else
                ctl__audit_dump_text(L.recs[r].r);
            r++;
        }
        for (size_t p = 0; p < L.n_problems; p++)
            fprintf(stderr, "dashctl audit: %s: offset %" PRIu64 ": %s\n", L.problems[p].file,
                    L.problems[p].offset, L.problems[p].what);
        ctl__audit_log_free(&L);
    }
    return CTL_EXIT_OK;
}

/* ---- verify -------------------------------------------------------------------------- */

static int cmd_verify(int argc, char **argv)
{
    if (argc < 2)
        return ctl__usage_error("audit", "verify needs at least one FILE");
    struct ctl_audit_log L;
    int rc = ctl__audit_read_files(&L, argc - 1, argv + 1);
    if (rc) {
        ctl__audit_log_free(&L);
        return rc;
    }
    int errors = 0, torn = 0;
    for (size_t p = 0; p < L.n_problems; p++) {
        const struct ctl_audit_problem *q = &L.problems[p];
        printf("%s: offset %" PRIu64 ": %s\n", q->file, q->offset, q->what);
        if (q->torn)
            torn = 1;
        else
            errors++;
    }
    if (L.n_headers == 0) {
        printf("no header: not a dashd audit log\n");
        errors++;
    }
    uint64_t first = L.n ? L.recs[0].r->seq : 0, last = L.n ? L.recs[L.n - 1].r->seq : 0;
    printf("%zu records", L.n);
    if (L.n)
        printf(" (seq %" PRIu64 "..%" PRIu64 ")", first, last);
    printf(" in %d file%s, %zu header%s: %s\n", argc - 1, argc > 2 ? "s" : "", L.n_headers,
           L.n_headers == 1 ? "" : "s",
           errors ? "PROBLEMS FOUND" : torn ? "valid up to a torn tail" : "OK");
    ctl__audit_log_free(&L);
    return errors ? CTL_EXIT_FAIL : torn ? CTL_EXIT_TORN : CTL_EXIT_OK;
}

/* ---- summary ------------------------------------------------------------------------- */

struct group {
    char op[16], sched[16];
    uint64_t count, errors, total_us;
};

static int cmp_num(int64_t a, int64_t b)
{
    return (a > b) - (a < b);
}

static int cmp_u64(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

static int cmp_float(float a, float b)
{
    uint32_t x, y; /* by bits: a total order, and equal bits are equal values */
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return (x > y) - (x < y);
}

/* An order on what makes two ops "the same": op, the parameters ctl__audit_params_differ
 * compares, kernel build and device, and the inputs (names, shapes, digests); 0 when they
 * are the same. */
static int cmp_call(const Dash__AuditRecord *a, const Dash__AuditRecord *b)
{
    int c;
    if ((c = strcmp(ctl__audit_str(a->op), ctl__audit_str(b->op))) ||
        (c = cmp_num(a->dtype, b->dtype)) || (c = cmp_num(a->mask, b->mask)) ||
        (c = cmp_float(a->scale, b->scale)) || (c = cmp_num(a->schedule, b->schedule)) ||
        (c = cmp_num(a->wave, b->wave)) || (c = cmp_num(a->block_m, b->block_m)) ||
        (c = cmp_num(a->block_n, b->block_n)) ||
        (c = cmp_num(a->has_window_left, b->has_window_left)) ||
        (c = cmp_num(a->window_left, b->window_left)) ||
        (c = cmp_num(a->window_right, b->window_right)) ||
        (c = cmp_float(a->softcap, b->softcap)) ||
        (c = cmp_num(a->batch_invariant, b->batch_invariant)) ||
        /* a packed batch: the same tokens packed otherwise are another call (their tensors
         * have the same shapes and digests, their offsets not) */
        (c = cmp_num(a->has_varlen_batch, b->has_varlen_batch)) ||
        (c = cmp_num(a->varlen_batch, b->varlen_batch)) ||
        (c = cmp_num(a->max_seqlen_q, b->max_seqlen_q)) ||
        (c = cmp_num(a->max_seqlen_k, b->max_seqlen_k)) ||
        (c = cmp_u64(a->cu_seqlens_q_digest, b->cu_seqlens_q_digest)) ||
        (c = cmp_u64(a->cu_seqlens_k_digest, b->cu_seqlens_k_digest)) ||
        (c = strcmp(ctl__audit_str(a->kernel_build), ctl__audit_str(b->kernel_build))) ||
        (c = strcmp(ctl__audit_str(a->device), ctl__audit_str(b->device))) ||
        (c = cmp_num(a->code, b->code)) || (c = cmp_num((int64_t)a->n_inputs, (int64_t)b->n_inputs)))
        return c;
    for (size_t i = 0; i < a->n_inputs; i++) {
        const Dash__AuditTensor *x = a->inputs[i], *y = b->inputs[i];
        if ((c = strcmp(ctl__audit_str(x->name), ctl__audit_str(y->name))) ||
            (c = cmp_num((int64_t)x->n_shape, (int64_t)y->n_shape)))
            return c;
        for (size_t k = 0; k < x->n_shape; k++)
            if ((c = cmp_num(x->shape[k], y->shape[k])))
                return c;
        if ((c = cmp_u64(x->digest, y->digest)))
            return c;
    }
    return 0;
}

static int by_call_then_place(const void *a, const void *b)
{
    const struct ctl_audit_rec *x = *(const struct ctl_audit_rec *const *)a,
                               *y = *(const struct ctl_audit_rec *const *)b;
    int c = cmp_call(x->r, y->r);
    return c ? c : (x > y) - (x < y); /* records lie in log order */
}

static int cmd_summary(int argc, char **argv)
{
    if (argc < 2)
        return ctl__usage_error("audit", "summary needs at least one FILE");
    struct ctl_audit_log L;
    int rc = ctl__audit_read_files(&L, argc - 1, argv + 1);
    if (rc) {
        ctl__audit_log_free(&L);
        return rc;
    }
    struct group g[64];
    size_t ng = 0;
    uint64_t with_inputs = 0, divergent = 0;
    for (size_t i = 0; i < L.n; i++) {
        const Dash__AuditRecord *r = L.recs[i].r;
        size_t k = 0;
        while (k < ng && (strcmp(g[k].op, ctl__audit_str(r->op)) ||
                          strcmp(g[k].sched, ctl__audit_sched_name(r))))
            k++;
        if (k == ng && ng < 64) {
            memset(&g[ng], 0, sizeof g[ng]);
            snprintf(g[ng].op, sizeof g[ng].op, "%s", ctl__audit_str(r->op));
            snprintf(g[ng].sched, sizeof g[ng].sched, "%s", ctl__audit_sched_name(r));
            ng++;
        }
        if (k < ng) {
            g[k].count++;
            g[k].errors += r->code != 0;
            g[k].total_us += r->duration_us;
        }
    }
    /* divergence: a record with an earlier one of the same parameters and inputs but other
     * outputs. Records that carry input digests are sorted by call (then log order), so each
     * record's earlier twins are the run just before it: it diverges unless they all had
     * its outputs, that is unless the run so far agreed on one set of outputs and it
     * matches them. O(n log n): a log at level all holds millions of such records. */
    const struct ctl_audit_rec **c = calloc(L.n ? L.n : 1, sizeof *c);
    if (!c) {
        ctl__audit_log_free(&L);
        return ctl__audit_out_of_memory();
    }
    size_t nc = 0;
    for (size_t i = 0; i < L.n; i++) {
        const Dash__AuditRecord *r = L.recs[i].r;
        if (!ctl__audit_all_digested(r->inputs, r->n_inputs) || r->code)
            continue;
        with_inputs++;
        /* outputs not digested compare with nothing (ctl__audit_cmp_tensors' -1) */
        if (ctl__audit_all_digested(r->outputs, r->n_outputs))
            c[nc++] = &L.recs[i];
    }
    qsort(c, nc, sizeof *c, by_call_then_place);
    size_t first = 0;
    int agreed = 1;
    for (size_t i = 0; i < nc; i++) {
        const Dash__AuditRecord *r = c[i]->r;
        char why[64];
        if (i == 0 || cmp_call(c[i - 1]->r, r) != 0) {
            first = i; /* the first op of its call */
            agreed = 1;
            continue;
        }
        const Dash__AuditRecord *f = c[first]->r;
        if (!agreed || ctl__audit_cmp_tensors(f->outputs, f->n_outputs, r->outputs, r->n_outputs,
                                              why, sizeof why) == 1) {
            divergent++;
            agreed = 0;
        }
    }
    free(c);
    printf("%zu records, %zu problems found by verify\n\n", L.n, L.n_problems);
    printf("%-10s %-12s %10s %8s %14s %12s\n", "OP", "SCHEDULE", "COUNT", "ERRORS", "TOTAL ms",
           "MEAN ms");
    for (size_t k = 0; k < ng; k++)
        printf("%-10s %-12s %10" PRIu64 " %8" PRIu64 " %14.3f %12.3f\n", g[k].op, g[k].sched,
               g[k].count, g[k].errors, (double)g[k].total_us / 1e3,
               g[k].count ? (double)g[k].total_us / 1e3 / (double)g[k].count : 0.0);
    if (with_inputs)
        printf("\ndivergences: %" PRIu64 " of %" PRIu64 " ops repeated an earlier op's parameters "
               "and inputs but not its outputs\n", divergent, with_inputs);
    else
        printf("\ndivergences: not known (inputs not recorded: dashd --audit-level all)\n");
    ctl__audit_log_free(&L);
    return CTL_EXIT_OK;
}

/* ---- entry --------------------------------------------------------------------------- */

int ctl_audit(int argc, char **argv)
{
    if (argc < 2)
        return ctl__usage_error("audit", "missing subcommand: dump, verify, diff or summary");
    const char *sub = argv[1];
    /* `dashctl audit SUB --help` too: the one usage covers every subcommand */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return CTL_EXIT_OK;
        }
    if (!strcmp(sub, "dump"))
        return cmd_dump(argc - 1, argv + 1);
    if (!strcmp(sub, "verify"))
        return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(sub, "diff"))
        return ctl__audit_diff(argc - 1, argv + 1);
    if (!strcmp(sub, "summary"))
        return cmd_summary(argc - 1, argv + 1);
    return ctl__usage_error("audit", "unknown subcommand '%s': dump, verify, diff or summary", sub);
}
