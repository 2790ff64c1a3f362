// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_audit_diff.c - `dashctl audit diff`: where two runs' audit logs part.
 *
 * Two ways to line records up:
 *
 *   by call site   A and B are files (or comma-separated lists of a rotated log's files).
 *                  Records are aligned by (client name and rank, step, label, op,
 *                  occurrence of that combination); A is walked in log order and the first
 *                  pair whose parameters or digests differ is printed. Sessions of one name
 *                  and rank that called at the same time pair in the order dashd received
 *                  their calls, which another run may not repeat: that is warned about.
 *
 *   rank by rank   A and B are directories of log files (one log per rank, one per
 *                  daemon, or one holding every rank), or --ranks is given. Records are
 *                  grouped by the rank their client gave in Hello (docs/audit.md), then
 *                  by step, and aligned by their index within the step: record 0 of step
 *                  3 of rank 1 in A against the same in B. Within one rank's step the
 *                  order is the order the daemon received that client's calls (forward
 *                  layer by layer, then the backward), so the index names the layer. Each
 *                  rank's first difference is printed, then the first of all (lowest
 *                  step, then index, then rank).
 *
 * In both, a pair differs in its parameters, its inputs (the divergence came in from the
 * client) or only its outputs (this op computed other bits). Logs whose headers name more
 * than one digest version (kernels/digest/digest.h) are refused before anything is
 * compared: their digests of equal bits differ.
 */
#include "client/dashctl/ctl.h"
#include "client/dashctl/ctl_audit.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- comparing two records ------------------------------------------------------------ */

/* The alignment key of a record: who (client name, and rank when given), when (step),
 * where (label), what (op), and its occurrence among records with the same four. */
struct keyed {
    const Dash__AuditRecord *r;
    char key[400];
    size_t at; /* its place in the log (the walk's order) */
    uint32_t occurrence;
    int matched;
};

/* Who made the call: the client name, and its rank when it gave one. */
static void who_of(const Dash__AuditRecord *r, char *buf, size_t len)
{
    if (r->has_rank && r->has_world_size)
        snprintf(buf, len, "%s\x1e%u", ctl__audit_str(r->client_name), r->rank);
    else
        snprintf(buf, len, "%s", ctl__audit_str(r->client_name));
}

static void key_of(const Dash__AuditRecord *r, char *buf, size_t len)
{
    char who[300];
    who_of(r, who, sizeof who);
    snprintf(buf, len, "%s\x1f%s%" PRIu64 "\x1f%s\x1f%s", who, r->has_step ? "" : "-",
             r->has_step ? r->step : 0, ctl__audit_str(r->label), ctl__audit_str(r->op));
}

/* One session's span in a log: who it is, its first and last record. */
struct span {
    char who[300];
    uint64_t session;
    size_t first, last;
};

static int by_who_session(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    int c = strcmp(x->who, y->who);
    if (c)
        return c;
    return (x->session > y->session) - (x->session < y->session);
}

static int by_who_first(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    int c = strcmp(x->who, y->who);
    return c ? c : (x->first > y->first) - (x->first < y->first);
}

/* Warn (stderr) about each name and rank under which two sessions of log `side` called at
 * the same time: their records share keys and pair in arrival order, which another run
 * need not repeat. Sessions one after another (a restart) pair as they came, rightly. */
static void warn_interleaved(const char *side, const struct keyed *k, size_t n)
{
    struct span *s = calloc(n ? n : 1, sizeof *s);
    if (!s)
        return;
    for (size_t i = 0; i < n; i++) {
        who_of(k[i].r, s[i].who, sizeof s[i].who);
        s[i].session = k[i].r->session_id;
        s[i].first = s[i].last = k[i].at;
    }
    qsort(s, n, sizeof *s, by_who_session);
    size_t m = 0; /* one span per (who, session) */
    for (size_t i = 0; i < n; i++) {
        if (m && !strcmp(s[m - 1].who, s[i].who) && s[m - 1].session == s[i].session) {
            if (s[i].first < s[m - 1].first)
                s[m - 1].first = s[i].first;
            if (s[i].last > s[m - 1].last)
                s[m - 1].last = s[i].last;
            continue;
        }
        s[m++] = s[i];
    }
    qsort(s, m, sizeof *s, by_who_first);
    size_t reach = 0; /* of this who's spans so far, the one that ends last */
    for (size_t i = 1; i < m; i++) {
        if (strcmp(s[i].who, s[i - 1].who) != 0) {
            reach = i;
            continue;
        }
        if (s[i].first > s[reach].last) { /* after every earlier one: a restart */
            reach = i;
            continue;
        }
        char name[300];
        snprintf(name, sizeof name, "%s", s[i].who);
        char *sep = strchr(name, '\x1e');
        if (sep)
            *sep = '\0';
        fprintf(stderr, "dashctl audit diff: %s: sessions %" PRIu64 " and %" PRIu64 " of client "
                "\"%s\"%s%s called at the same time: their records pair in the order dashd "
                "received them, which another run need not repeat; give each process its own "
                "client name or rank (Hello), or compare rank by rank (--ranks)\n", side,
                s[reach].session, s[i].session, name, sep ? " rank " : "", sep ? sep + 1 : "");
        while (i + 1 < m && !strcmp(s[i + 1].who, s[i].who)) /* once per who */
            i++;
    }
    free(s);
}

static int cmp_key(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return (x->occurrence > y->occurrence) - (x->occurrence < y->occurrence);
}

static int by_key_then_place(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

static int by_place_in_log(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    return (x->at > y->at) - (x->at < y->at);
}

static struct keyed *keyed_of(const struct ctl_audit_log *L, const char *run, size_t *ret_n)
{
    struct keyed *k = calloc(L->n ? L->n : 1, sizeof *k);
    size_t n = 0;
    if (!k)
        return NULL;
    for (size_t i = 0; i < L->n; i++) {
        const Dash__AuditRecord *r = L->recs[i].r;
        if (run && strcmp(ctl__audit_str(r->run_tag), run) != 0)
            continue;
        k[n].r = r;
        k[n].at = n;
        key_of(r, k[n].key, sizeof k[n].key);
        n++;
    }
    /* occurrences in the log's order: sorted by key (then place), each key's records are
     * counted in a row; then back to the log's order. O(n log n): a run's log holds
     * millions of records. */
    qsort(k, n, sizeof *k, by_key_then_place);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(k[i].key, k[i - 1].key))
            k[i].occurrence = k[i - 1].occurrence + 1;
    qsort(k, n, sizeof *k, by_place_in_log);
    *ret_n = n;
    return k;
}

int ctl__audit_all_digested(Dash__AuditTensor **t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!t[i]->has_digest)
            return 0;
    return n > 0;
}

int ctl__audit_cmp_tensors(Dash__AuditTensor **a, size_t na, Dash__AuditTensor **b, size_t nb,
                       char *buf, size_t len)
{
    if (!ctl__audit_all_digested(a, na) || !ctl__audit_all_digested(b, nb))
        return -1;
    if (na != nb) {
        snprintf(buf, len, "%zu tensors vs %zu", na, nb);
        return 1;
    }
    int diff = 0;
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < na; i++) {
        int differs = strcmp(ctl__audit_str(a[i]->name), ctl__audit_str(b[i]->name)) ||
                      a[i]->n_shape != b[i]->n_shape || a[i]->has_digest != b[i]->has_digest ||
                      a[i]->digest != b[i]->digest;
        for (size_t k = 0; !differs && k < a[i]->n_shape; k++)
            differs = a[i]->shape[k] != b[i]->shape[k];
        if (differs) {
            diff = 1;
            if (at < len)
                at += (size_t)snprintf(buf + at, len - at, "%s%s %016" PRIx64 " vs %016" PRIx64,
                                       at ? ", " : "", ctl__audit_str(a[i]->name), a[i]->digest,
                                       b[i]->digest);
        }
    }
    return diff;
}

int ctl__audit_params_differ(const Dash__AuditRecord *a, const Dash__AuditRecord *b, char *buf,
                         size_t len)
{
    if (a->dtype != b->dtype || a->mask != b->mask || a->scale != b->scale) {
        snprintf(buf, len, "dtype/mask/scale differ");
        return 1;
    }
    if (a->schedule != b->schedule || a->wave != b->wave || a->block_m != b->block_m ||
        a->block_n != b->block_n) {
        snprintf(buf, len, "schedule %s(W=%d %dx%d) vs %s(W=%d %dx%d)", ctl__audit_sched_name(a),
                 a->wave, a->block_m, a->block_n, ctl__audit_sched_name(b), b->wave, b->block_m,
                 b->block_n);
        return 1;
    }
    if (a->has_window_left != b->has_window_left || a->window_left != b->window_left ||
        a->window_right != b->window_right || a->softcap != b->softcap) {
        snprintf(buf, len, "window (%d, %d) softcap %g vs window (%d, %d) softcap %g",
                 a->has_window_left ? a->window_left : -1, a->has_window_left ? a->window_right : -1,
                 (double)a->softcap, b->has_window_left ? b->window_left : -1,
                 b->has_window_left ? b->window_right : -1, (double)b->softcap);
        return 1;
    }
    if (a->batch_invariant != b->batch_invariant) {
        snprintf(buf, len, "batch_invariant %d vs %d", a->batch_invariant, b->batch_invariant);
        return 1;
    }
    if (a->code != b->code) {
        snprintf(buf, len, "result code %d vs %d", a->code, b->code);
        return 1;
    }
    return 0;
}

int ctl__audit_where_differs(const Dash__AuditRecord *a, const Dash__AuditRecord *b, char *buf,
                             size_t len)
{
    if (!strcmp(ctl__audit_str(a->kernel_build), ctl__audit_str(b->kernel_build)) &&
        !strcmp(ctl__audit_str(a->device), ctl__audit_str(b->device)))
        return 0;
    snprintf(buf, len, "\"%s\" on \"%s\" vs \"%s\" on \"%s\"", ctl__audit_str(a->kernel_build),
             ctl__audit_str(a->device), ctl__audit_str(b->kernel_build), ctl__audit_str(b->device));
    return 1;
}

/* A packed batch's layout: 1 and a description when the two records' sequences differ
 * (one packed and one not, another count, bounds or offsets), else 0. */
static int packing_differs(const Dash__AuditRecord *a, const Dash__AuditRecord *b, char *buf,
                           size_t len)
{
    if (a->has_varlen_batch != b->has_varlen_batch) {
        snprintf(buf, len, "A is %s, B is %s", a->has_varlen_batch ? "a packed batch" : "dense",
                 b->has_varlen_batch ? "a packed batch" : "dense");
        return 1;
    }
    if (!a->has_varlen_batch)
        return 0;
    if (a->varlen_batch != b->varlen_batch || a->cu_seqlens_q_digest != b->cu_seqlens_q_digest ||
        a->cu_seqlens_k_digest != b->cu_seqlens_k_digest || a->max_seqlen_q != b->max_seqlen_q ||
        a->max_seqlen_k != b->max_seqlen_k) {
        snprintf(buf, len, "%u sequences, cu_seqlens_q %016" PRIx64 " cu_seqlens_k %016" PRIx64
                 " vs %u, %016" PRIx64 " %016" PRIx64, a->varlen_batch, a->cu_seqlens_q_digest,
                 a->cu_seqlens_k_digest, b->varlen_batch, b->cu_seqlens_q_digest,
                 b->cu_seqlens_k_digest);
        return 1;
    }
    return 0;
}

static void describe(const char *side, const Dash__AuditRecord *r)
{
    printf("  %s: ", side);
    ctl__audit_dump_text(r);
}


/* How a matched pair differs: parameters, inputs, outputs (ctl__audit_cmp_tensors' -1 / 0
 * / 1 for the last two), each described. */
struct verdict {
    int pd, kd, id, od; /* parameters, packing (kd), inputs, outputs */
    int wd;             /* kernel build or device (context: not a difference of its own) */
    char par[200], pack[200], in[300], out[300], where[600];
};

static int judge(const Dash__AuditRecord *a, const Dash__AuditRecord *b, struct verdict *v)
{
    v->par[0] = v->pack[0] = v->in[0] = v->out[0] = v->where[0] = '\0';
    v->pd = ctl__audit_params_differ(a, b, v->par, sizeof v->par);
    v->wd = ctl__audit_where_differs(a, b, v->where, sizeof v->where);
    v->kd = packing_differs(a, b, v->pack, sizeof v->pack);
    v->id = ctl__audit_cmp_tensors(a->inputs, a->n_inputs, b->inputs, b->n_inputs, v->in,
                                   sizeof v->in);
    v->od = ctl__audit_cmp_tensors(a->outputs, a->n_outputs, b->outputs, b->n_outputs, v->out,
                                   sizeof v->out);
    return v->pd || v->kd || v->id > 0 || v->od > 0;
}

static void explain(const struct verdict *v)
{
    if (v->pd)
        printf("  parameters differ: %s\n", v->par);
    if (v->kd && v->id == 0)
        printf("  same tokens, different packing: q, k, v and dout are the same bytes, the "
               "sequences are cut differently (%s)\n", v->pack);
    else if (v->kd && v->id == 1)
        printf("  different tokens and different packing (%s)\n", v->pack);
    else if (v->kd)
        printf("  different packing (%s); inputs not recorded on both sides (--audit-level "
               "all tells same tokens from different ones)\n", v->pack);
    else if (v->id == 1)
        printf("  inputs differ: %s\n  (the divergence came in with the inputs: look at what "
               "the client computed before this op)\n", v->in);
    else if (v->od == 1 && v->id == 0)
        printf("  only outputs differ: %s\n  (same inputs, different result: this op computed "
               "different bits)\n", v->out);
    else if (v->od == 1)
        printf("  outputs differ: %s\n  (inputs not recorded on both sides: run dashd with "
               "--audit-level all to tell inputs from outputs)\n", v->out);
    if (v->wd)
        printf("  kernel build or device differ: %s\n", v->where);
}

static void warn_problems(const struct ctl_audit_log *L)
{
    for (size_t p = 0; p < L->n_problems; p++)
        fprintf(stderr, "dashctl audit: warning: %s: offset %" PRIu64 ": %s\n",
                L->problems[p].file, L->problems[p].offset, L->problems[p].what);
}

/* The digest versions (kernels/digest/digest.h) of a log's headers, widening [*lo, *hi];
 * a header that names none is version 1. */
static void versions_of(const struct ctl_audit_log *L, uint32_t *lo, uint32_t *hi)
{
    for (size_t h = 0; h < L->n_headers; h++) {
        const Dash__AuditHeader *hd = L->headers[h]->header;
        const uint32_t v = hd->has_digest_version ? hd->digest_version : 1;
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
}

/* Digests of two definitions never compare (equal bits would read as different ones):
 * CTL_EXIT_USAGE with the reason when the logs name more than one version, else 0. */
static int refuse_mixed_versions(uint32_t lo, uint32_t hi)
{
    if (lo >= hi)
        return 0;
    fprintf(stderr, "dashctl audit: diff: these logs hold digests of versions %u and %u "
            "(the definition in kernels/digest/digest.h changed between the dashd builds that "
            "wrote them); equal bits would read as different digests, so nothing is compared. "
            "Record both runs with dashd builds of one digest version\n", lo, hi);
    return CTL_EXIT_USAGE;
}

/* Neither side holds a record (of its run tag): CTL_EXIT_USAGE with the reason. */
static int nothing_to_compare(const char *run_a, const char *run_b)
{
    return ctl__usage_error("audit", "diff: no records to compare in A%s%s%s nor in B%s%s%s; "
                            "nothing is proven identical", run_a ? " of run tag \"" : "",
                            run_a ? run_a : "", run_a ? "\"" : "", run_b ? " of run tag \"" : "",
                            run_b ? run_b : "", run_b ? "\"" : "");
}

/* ---- by call site --------------------------------------------------------------------- */

static int diff_files(const char *a, const char *b, const char *run_a, const char *run_b)
{
    struct ctl_audit_log A, B;
    int rc = ctl__audit_read_list(&A, a);
    if (!rc)
        rc = ctl__audit_read_list(&B, b);
    else
        memset(&B, 0, sizeof B);
    if (rc) {
        ctl__audit_log_free(&A);
        ctl__audit_log_free(&B);
        return rc;
    }
    uint32_t lo = UINT32_MAX, hi = 0;
    versions_of(&A, &lo, &hi);
    versions_of(&B, &lo, &hi);
    if ((rc = refuse_mixed_versions(lo, hi))) {
        ctl__audit_log_free(&A);
        ctl__audit_log_free(&B);
        return rc;
    }
    warn_problems(&A);
    warn_problems(&B);
    size_t na = 0, nb = 0;
    struct keyed *ka = keyed_of(&A, run_a, &na), *kb = keyed_of(&B, run_b, &nb);
    if (!ka || !kb) {
        free(ka);
        free(kb);
        ctl__audit_log_free(&A);
        ctl__audit_log_free(&B);
        return ctl__audit_out_of_memory();
    }
    warn_interleaved("A", ka, na);
    warn_interleaved("B", kb, nb);
    if (na == 0 && nb == 0) {
        /* nothing compared proves nothing: a run tag that matches no record (a typo) or two
         * files that are no audit logs must not read as "identical" */
        free(ka);
        free(kb);
        ctl__audit_log_free(&A);
        ctl__audit_log_free(&B);
        return nothing_to_compare(run_a, run_b);
    }
    /* B sorted for lookup; A walked in log order, so the first divergence is the earliest */
    qsort(kb, nb, sizeof *kb, cmp_key);
    size_t matched = 0, only_a = 0;
    int diverged = 0;
    for (size_t i = 0; i < na && !diverged; i++) {
        struct keyed *hit = bsearch(&ka[i], kb, nb, sizeof *kb, cmp_key);
        if (!hit) {
            only_a++;
            continue;
        }
        hit->matched = 1;
        matched++;
        struct verdict v;
        if (!judge(ka[i].r, hit->r, &v))
            continue;
        diverged = 1;
        const Dash__AuditRecord *r = ka[i].r;
        printf("first divergent record: client \"%s\" step %s%" PRIu64 " label \"%s\" %s "
               "(occurrence %u)\n", ctl__audit_str(r->client_name), r->has_step ? "" : "-",
               r->has_step ? r->step : 0, ctl__audit_str(r->label), ctl__audit_str(r->op),
               ka[i].occurrence);
        describe("A", r);
        describe("B", hit->r);
        explain(&v);
    }
    size_t only_b = 0;
    if (!diverged)
        for (size_t i = 0; i < nb; i++)
            only_b += !kb[i].matched;
    if (!diverged) {
        if (only_a || only_b)
            printf("no divergent record among %zu matched; %zu only in A, %zu only in B\n",
                   matched, only_a, only_b);
        else
            printf("identical: %zu records matched, every digest equal\n", matched);
    }
    free(ka);
    free(kb);
    ctl__audit_log_free(&A);
    ctl__audit_log_free(&B);
    return diverged || only_a || only_b ? CTL_EXIT_FAIL : CTL_EXIT_OK;
}

/* ---- rank by rank --------------------------------------------------------------------- */

#define NO_RANK INT64_MAX   /* records whose client gave no rank sort after every rank */
#define NO_STEP UINT64_MAX  /* and records without a step after every step */

/* A record with its place in a run: rank, step, and its index within that rank's step
 * (after sorting); first_ns orders the logs (daemon runs) a rank's records came from. */
struct ranked {
    const Dash__AuditRecord *r;
    int64_t rank;
    uint64_t step, first_ns;
    uint32_t index;
};

/* One side: the logs read (one per file of a directory, or one list) and their records. */
struct run {
    struct ctl_audit_log *logs;
    size_t n_logs, cap_logs;
    struct ranked *e;
    size_t n;
};

static void run_free(struct run *R)
{
    for (size_t i = 0; i < R->n_logs; i++)
        ctl__audit_log_free(&R->logs[i]);
    free(R->logs);
    free(R->e);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Read one more log into R from the file list `list`; a file with no header in it is no
 * audit log and is skipped with a warning (a directory may hold other files too). */
static int add_log(struct run *R, const char *list, int from_dir)
{
    if (ctl__audit_reserve((void **)&R->logs, &R->cap_logs, R->n_logs, sizeof *R->logs))
        return ctl__audit_out_of_memory();
    struct ctl_audit_log *L = &R->logs[R->n_logs++];
    int rc = ctl__audit_read_list(L, list);
    if (rc)
        return rc;
    if (from_dir && L->n_headers == 0) {
        fprintf(stderr, "dashctl audit: warning: %s holds no audit log header: skipped\n", list);
        ctl__audit_log_free(L);
        R->n_logs--;
        return 0;
    }
    warn_problems(L);
    return 0;
}

/* Every regular file of dir (names not starting with '.'), in name order, each a log. */
static int read_dir(struct run *R, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return ctl__usage_error("audit", "cannot open directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char *path = NULL;
        struct stat st;
        if (asprintf(&path, "%s/%s", dir, de->d_name) < 0) {
            rc = ctl__audit_out_of_memory();
            break;
        }
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (ctl__audit_reserve((void **)&names, &cap, n, sizeof *names)) {
            free(path);
            rc = ctl__audit_out_of_memory();
            break;
        }
        names[n++] = path;
    }
    closedir(d);
    if (!rc && n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; !rc && i < n; i++)
        rc = add_log(R, names[i], 1);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!rc && R->n_logs == 0)
        rc = ctl__usage_error("audit", "%s holds no audit log", dir);
    return rc;
}

static int by_log_seq(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->r->log_id != y->r->log_id)
        return x->r->log_id < y->r->log_id ? -1 : 1;
    return (x->r->seq > y->r->seq) - (x->r->seq < y->r->seq);
}

static int cmp_u64(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

/* A rank's records by step, then in the order the daemon(s) received them. */
static int by_place(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    int c;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if ((c = cmp_u64(x->step, y->step)) || (c = cmp_u64(x->first_ns, y->first_ns)) ||
        (c = cmp_u64(x->r->log_id, y->r->log_id)))
        return c;
    return cmp_u64(x->r->seq, y->r->seq);
}

/* The records of R's logs (of run tag `tag` when given), each with its rank, step and
 * index within the step. */
static int place(struct run *R, const char *tag)
{
    size_t total = 0;
    for (size_t i = 0; i < R->n_logs; i++)
        total += R->logs[i].n;
    R->e = calloc(total ? total : 1, sizeof *R->e);
    if (!R->e)
        return ctl__audit_out_of_memory();
    for (size_t i = 0; i < R->n_logs; i++)
        for (size_t k = 0; k < R->logs[i].n; k++) {
            const Dash__AuditRecord *r = R->logs[i].recs[k].r;
            if (tag && strcmp(ctl__audit_str(r->run_tag), tag) != 0)
                continue;
            struct ranked *e = &R->e[R->n++];
            e->r = r;
            e->rank = r->has_rank && r->has_world_size ? (int64_t)r->rank : NO_RANK;
            e->step = r->has_step ? r->step : NO_STEP;
        }
    /* each log's first arrival time orders a rank's records across daemon restarts */
    qsort(R->e, R->n, sizeof *R->e, by_log_seq);
    for (size_t i = 0, start = 0; i <= R->n; i++) {
        if (i < R->n && R->e[i].r->log_id == R->e[start].r->log_id)
            continue;
        uint64_t first = UINT64_MAX;
        for (size_t k = start; k < i; k++)
            if (R->e[k].r->wall_unix_ns < first)
                first = R->e[k].r->wall_unix_ns;
        for (size_t k = start; k < i; k++)
            R->e[k].first_ns = first;
        start = i;
    }
    qsort(R->e, R->n, sizeof *R->e, by_place);
    for (size_t i = 0; i < R->n; i++)
        R->e[i].index = i && R->e[i - 1].rank == R->e[i].rank && R->e[i - 1].step == R->e[i].step
                            ? R->e[i - 1].index + 1 : 0;
    return 0;
}

static int cmp_slot(const struct ranked *x, const struct ranked *y)
{
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    int c = cmp_u64(x->step, y->step);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static void print_rank(int64_t rank)
{
    if (rank == NO_RANK)
        printf("no rank");
    else
        printf("rank %" PRId64, rank);
}

/* "[rank R, ]step S, record I of the step (op "label")" */
static void print_place(const struct ranked *e, int with_rank)
{
    if (with_rank) {
        print_rank(e->rank);
        printf(", ");
    }
    if (e->step == NO_STEP)
        printf("no step");
    else
        printf("step %" PRIu64, e->step);
    printf(", record %u of the step (%s", e->index, ctl__audit_str(e->r->op));
    if (e->r->label && e->r->label[0])
        printf(" \"%s\"", e->r->label);
    printf(")");
}

/* What one rank's walk found: its first difference (a divergent pair, or a record on one
 * side only), and its counts. */
struct rank_diff {
    const struct ranked *a, *b; /* the first difference; either NULL: only on the other side */
    struct verdict v;
    size_t matched, only_a, only_b;
};

static void report_rank(int64_t rank, const struct rank_diff *d)
{
    print_rank(rank);
    if (!d->a && !d->b) {
        printf(": identical, %zu records matched\n", d->matched);
        return;
    }
    const struct ranked *at = d->a ? d->a : d->b;
    printf(": first difference at ");
    print_place(at, 0);
    printf("\n");
    if (d->a)
        describe("A", d->a->r);
    if (d->b)
        describe("B", d->b->r);
    if (d->a && d->b) {
        if (strcmp(ctl__audit_str(d->a->r->op), ctl__audit_str(d->b->r->op)) ||
            strcmp(ctl__audit_str(d->a->r->label), ctl__audit_str(d->b->r->label)))
            printf("  a different call: the runs made other calls at this point\n");
        if (d->a->r->world_size != d->b->r->world_size)
            printf("  world size %u vs %u\n", d->a->r->world_size, d->b->r->world_size);
        explain(&d->v);
    } else {
        printf("  only in %s (the other run has no such record)\n", d->a ? "A" : "B");
    }
    printf("  (%zu records matched, %zu only in A, %zu only in B)\n", d->matched, d->only_a,
           d->only_b);
}

static int differ(const struct ranked *a, const struct ranked *b, struct verdict *v)
{
    int call = strcmp(ctl__audit_str(a->r->op), ctl__audit_str(b->r->op)) ||
               strcmp(ctl__audit_str(a->r->label), ctl__audit_str(b->r->label)) ||
               a->r->world_size != b->r->world_size;
    return judge(a->r, b->r, v) || call;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int diff_ranks(const char *a, const char *b, const char *run_a, const char *run_b)
{
    struct run A = {0}, B = {0};
    int rc = 0;
    for (int side = 0; side < 2 && !rc; side++) {
        const char *arg = side ? b : a;
        struct run *R = side ? &B : &A;
        if (is_dir(arg))
            rc = read_dir(R, arg);
        else
            rc = add_log(R, arg, 0);
        if (!rc)
            rc = place(R, side ? run_b : run_a);
    }
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t l = 0; l < A.n_logs; l++)
        versions_of(&A.logs[l], &lo, &hi);
    for (size_t l = 0; l < B.n_logs; l++)
        versions_of(&B.logs[l], &lo, &hi);
    if (!rc)
        rc = refuse_mixed_versions(lo, hi);
    if (!rc && A.n == 0 && B.n == 0)
        rc = nothing_to_compare(run_a, run_b);
    if (rc) {
        run_free(&A);
        run_free(&B);
        return rc;
    }
    size_t i = 0, j = 0, ranks = 0, differing = 0;
    const struct ranked *first = NULL;
    while (i < A.n || j < B.n) {
        int64_t rank = i < A.n && (j >= B.n || A.e[i].rank <= B.e[j].rank) ? A.e[i].rank
                                                                           : B.e[j].rank;
        struct rank_diff d;
        memset(&d, 0, sizeof d);
        while ((i < A.n && A.e[i].rank == rank) || (j < B.n && B.e[j].rank == rank)) {
            int in_a = i < A.n && A.e[i].rank == rank, in_b = j < B.n && B.e[j].rank == rank;
            int c = in_a && in_b ? cmp_slot(&A.e[i], &B.e[j]) : in_a ? -1 : 1;
            int found = d.a || d.b;
            if (c < 0) {
                if (!found)
                    d.a = &A.e[i];
                d.only_a++;
                i++;
            } else if (c > 0) {
                if (!found)
                    d.b = &B.e[j];
                d.only_b++;
                j++;
            } else {
                d.matched++;
                struct verdict v;
                if (!found && differ(&A.e[i], &B.e[j], &v)) {
                    d.a = &A.e[i];
                    d.b = &B.e[j];
                    d.v = v;
                }
                i++;
                j++;
            }
        }
        report_rank(rank, &d);
        ranks++;
        const struct ranked *at = d.a ? d.a : d.b;
        if (at) {
            differing++;
            if (!first || at->step < first->step ||
                (at->step == first->step && at->index < first->index))
                first = at;
        }
    }
    if (first) {
        printf("first divergence: ");
        print_place(first, 1);
        printf("; %zu of %zu ranks differ\n", differing, ranks);
    } else {
        printf("identical: %zu rank%s, every record matched with every digest equal\n", ranks,
               ranks == 1 ? "" : "s");
    }
    run_free(&A);
    run_free(&B);
    return first ? CTL_EXIT_FAIL : CTL_EXIT_OK;
}

/* ---- the command ---------------------------------------------------------------------- */

int ctl__audit_diff(int argc, char **argv)
{
    static const struct option opts[] = {
        {"run-a", required_argument, NULL, 'a'},
        {"run-b", required_argument, NULL, 'b'},
        {"ranks", no_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    const char *run_a = NULL, *run_b = NULL;
    int ranks = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (c == 'a')
            run_a = optarg;
        else if (c == 'b')
            run_b = optarg;
        else if (c == 'r')
            ranks = 1;
        else
            return ctl__getopt_error("audit diff", c, argc, argv, 'a');
    }
    if (argc - optind != 2)
        return ctl__usage_error("audit", "diff needs two runs, A and B");
    const char *a = argv[optind], *b = argv[optind + 1];
    int dirs = is_dir(a) + is_dir(b);
    if (dirs == 1)
        return ctl__usage_error("audit", "diff: %s is a directory but %s is not; give two "
                                "directories (rank by rank) or two files", is_dir(a) ? a : b,
                                is_dir(a) ? b : a);
    if (dirs == 2 || ranks)
        return diff_ranks(a, b, run_a, run_b);
    return diff_files(a, b, run_a, run_b);
}
