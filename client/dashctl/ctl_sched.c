// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_sched.c - `dashctl sched`: what each backward-pass schedule does on one shape, and
 * how long the DAG model of kernels/sched/dag.h says it takes. Offline: no daemon is involved.
 *
 * The command runs in phases so that a bad request writes nothing to stdout and a good
 * one writes one complete document:
 *
 *   parse      options -> struct sched_opts; every value is range-checked here
 *   resolve    sched_init() for each selected schedule, dag_auto() when `auto` is wanted
 *   model      dag_model() for each, and the visit/order grids of head 0
 *   print      text, JSON, or (for one schedule) the DAG as Graphviz DOT
 *
 * A schedule that deadlocks on the modelled SM count (shift with fewer SMs than jobs in a
 * chunk) is a result, not an error: it is reported as such and the exit status stays 0.
 */
#include "client/dashctl/ctl.h"
#include "kernels/sched/dag.h"
#include "kernels/sched/sched.h"
#include "proto/errors.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHED_ALL (-1) /* sched_opts.kind: every schedule */

#define CTL_STR_(x) #x
#define CTL_STR(x) CTL_STR_(x)

#define CTL_SEQS_MAX 4096 /* sequences --cu-seqlens may list */

struct sched_opts {
    enum sched_mask mask;
    int32_t window, window_left, window_right; /* --window L,R */
    /* --cu-seqlens (and --cu-seqlens-k): a packed batch; nseq 0: one dense shape */
    int32_t nseq;
    int32_t *cu_q, *cu_k; /* nseq + 1 offsets each (malloc'd; cu_k may be cu_q) */
    int32_t tiles, q_tiles, kv_tiles; /* q_tiles/kv_tiles 0: take `tiles` */
    int32_t block_m, block_n;
    int32_t heads, batch;
    int32_t w, sms; /* sms 0: take w */
    double c, r;
    int kind; /* enum sched_kind, or SCHED_ALL */
    int json, dot, help;
};

/* One modelled schedule. The grids describe head 0 only: every head runs the same
 * pattern, and one head is what a reader can take in. */
struct sched_row {
    int on;        /* selected for output */
    struct sched s;
    int deadlock;  /* dag_model() said -EDEADLK; st.makespan is then meaningless */
    struct dag_stats st;
    int32_t *visits; /* (N, M): visits[n*M + step] = q-tile kv-tile n visits at that step */
    int32_t *orders; /* (M, N): orders[m*N + i] = i-th kv-tile added into dQ tile m */
};

/* The most (q-tile, kv-tile) pairs, all heads and sequences, one run models: 4M (--tiles
 * 2048: 3.5 s and 165 MiB on the 2-core build machine; 1M: 0.95 s, 46 MiB). */
#define SCHED_CTL_MAX_PAIRS (1 << 22)

/* Finite costs can still sum past the largest double; JSON has no inf, so that is refused. */
#define COSTS_OVERFLOW "--c %g and --r %g are too large: the modelled times overflow"

static const char usage_text[] =
    "usage: dashctl sched [options]\n"
    "\n"
    "Model the backward-pass schedules of one attention shape with the DAG model\n"
    "(kernels/sched/dag.h): makespan, which q-tile each kv-tile visits at each step, and the\n"
    "order in which each dQ tile's partial sums are added. Offline; no daemon is used.\n"
    "\n"
    "shape:\n"
    "  --mask full|causal   attention mask (default full)\n"
    "  --tiles N            q-tiles and kv-tiles per head (default 8)\n"
    "  --q-tiles N          q-tiles per head (overrides --tiles)\n"
    "  --kv-tiles N         kv-tiles per head (overrides --tiles)\n"
    "  --block-m R          rows per q-tile (default 64); seqlen_q = q-tiles * R\n"
    "  --block-n R          rows per kv-tile (default 64); seqlen_k = kv-tiles * R\n"
    "  --heads H            query heads (default 1)\n"
    "  --batch B            batch size (default 1)\n"
    "  --window L,R         sliding window, flash-attn's window_size in rows (-1: unbounded;\n"
    "                       causal forces R = 0); tiles outside the band are not visited\n"
    "  --cu-seqlens 0,A,B,..  a packed batch: sequence i has rows [cu[i], cu[i+1]), each\n"
    "                       tiled and scheduled alone, their jobs dispatched one sequence\n"
    "                       after another (replaces --tiles, --q-tiles, --kv-tiles, --batch;\n"
    "                       shows makespans, not grids; auto's choice is printed both as\n"
    "                       a plain and as a batch-invariant request resolves it)\n"
    "  --cu-seqlens-k LIST  the keys' offsets when they differ from the queries'\n"
    "  (a shape of more than 4194304 (q-tile, kv-tile) pairs, all heads and sequences,\n"
    "  is refused: the model would take minutes)\n"
    "model:\n"
    "  --w W                virtual wave size of shift (default " CTL_STR(SCHED_W_DEFAULT)
    ", at most " CTL_STR(SCHED_W_MAX) ")\n"
    "  --sms P              SMs modelled (default W)\n"
    "  --c C                cost of one compute node (default 1)\n"
    "  --r R                cost of one dQ reduction node (default 0.25)\n"
    "output:\n"
    "  --schedule NAME      only atomic|ascending|descending|spt|shift|auto (default: all)\n"
    "  --json               one JSON object instead of text\n"
    "  --dot                the DAG of one schedule as Graphviz DOT: --schedule's, or the\n"
    "                       one auto chooses\n"
    "  -h, --help           this text\n"
    "\n"
    "auto picks the deterministic schedule with the smallest makespan modelled on W SMs\n"
    "with c = 1, r = 0.25 (so the choice is the same on every GPU); its makespan is then\n"
    "shown on --sms SMs with --c and --r. A schedule that cannot finish on --sms SMs is\n"
    "reported as a deadlock.\n"
    "Exit status: 0 success, 1 failure, 2 bad option or value.\n";

/* Report a usage problem as the one line the caller promises, and give the status. */
static int sched_bad(const char *fmt, ...)
{
    va_list ap;
    fputs("dashctl sched: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CTL_EXIT_USAGE;
}

/* ---- parsing ---------------------------------------------------------------------- */

static int parse_int(const char *opt, const char *arg, int32_t lo, int32_t hi, int32_t *ret)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (end == arg || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        return sched_bad("--%s must be an integer from %d to %d, not '%s'", opt, lo, hi, arg);
    *ret = (int32_t)v;
    return 0;
}

/* Costs must be finite (they end up in JSON, which has no inf or nan) and >= 0. */
static int parse_cost(const char *opt, const char *arg, double *ret)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0)
        return sched_bad("--%s must be a finite number >= 0, not '%s'", opt, arg);
    *ret = v;
    return 0;
}

enum {
    OPT_MASK = 256,
    OPT_TILES,
    OPT_Q_TILES,
    OPT_KV_TILES,
    OPT_BLOCK_M,
    OPT_BLOCK_N,
    OPT_HEADS,
    OPT_BATCH,
    OPT_W,
    OPT_SMS,
    OPT_C,
    OPT_R,
    OPT_SCHEDULE,
    OPT_JSON,
    OPT_DOT,
    OPT_WINDOW,
    OPT_CU,
    OPT_CU_K,
};

static const struct option long_opts[] = {
    {"mask", required_argument, NULL, OPT_MASK},
    {"tiles", required_argument, NULL, OPT_TILES},
    {"q-tiles", required_argument, NULL, OPT_Q_TILES},
    {"kv-tiles", required_argument, NULL, OPT_KV_TILES},
    {"block-m", required_argument, NULL, OPT_BLOCK_M},
    {"block-n", required_argument, NULL, OPT_BLOCK_N},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"w", required_argument, NULL, OPT_W},
    {"sms", required_argument, NULL, OPT_SMS},
    {"c", required_argument, NULL, OPT_C},
    {"r", required_argument, NULL, OPT_R},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"json", no_argument, NULL, OPT_JSON},
    {"dot", no_argument, NULL, OPT_DOT},
    {"window", required_argument, NULL, OPT_WINDOW},
    {"cu-seqlens", required_argument, NULL, OPT_CU},
    {"cu-seqlens-k", required_argument, NULL, OPT_CU_K},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* "L,R" with each side >= -1. */
static int parse_window(const char *arg, struct sched_opts *o)
{
    char *end, *end2;
    errno = 0;
    long long l = strtoll(arg, &end, 10);
    if (end == arg || *end != ',')
        return sched_bad("--window must be L,R (e.g. 1024,0), not '%s'", arg);
    long long r = strtoll(end + 1, &end2, 10);
    if (end2 == end + 1 || *end2 != '\0' || errno == ERANGE || l < -1 || r < -1 || l > INT32_MAX ||
        r > INT32_MAX)
        return sched_bad("--window L,R: each side an integer >= -1 (-1: unbounded), not '%s'", arg);
    o->window = 1;
    o->window_left = (int32_t)l;
    o->window_right = (int32_t)r;
    return 0;
}

/* "0,A,B,...": offsets from 0, never decreasing, at most CTL_SEQS_MAX sequences. */
static int parse_offsets(const char *opt, const char *arg, int32_t **ret, int32_t *ret_n)
{
    int32_t *cu = malloc(sizeof(int32_t) * (CTL_SEQS_MAX + 1));
    int32_t n = 0;
    const char *at = arg;
    if (!cu)
        return sched_bad("%s", dash_strerror(-ENOMEM));
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(at, &end, 10);
        if (end == at || (*end != ',' && *end != '\0') || errno == ERANGE || v < 0 || v > INT32_MAX) {
            free(cu);
            return sched_bad("--%s: '%s' is not a list of offsets 0,A,B,...", opt, arg);
        }
        if (n > CTL_SEQS_MAX) {
            free(cu);
            return sched_bad("--%s: at most %d sequences", opt, CTL_SEQS_MAX);
        }
        if ((n == 0 && v != 0) || (n > 0 && v < cu[n - 1])) {
            int32_t prev = n ? cu[n - 1] : 0;
            free(cu);
            return n == 0 ? sched_bad("--%s must start at 0", opt)
                          : sched_bad("--%s: offset %lld is below the one before it (%d)", opt, v,
                                      prev);
        }
        cu[n++] = (int32_t)v;
        if (*end == '\0')
            break;
        at = end + 1;
    }
    if (n < 2) {
        free(cu);
        return sched_bad("--%s needs at least two offsets (one sequence)", opt);
    }
    free(*ret);
    *ret = cu;
    *ret_n = n - 1;
    return 0;
}

/* Fill *ret from argv. Returns 0, or CTL_EXIT_USAGE after reporting the problem. */
static int sched_parse(int argc, char **argv, struct sched_opts *ret)
{
    struct sched_opts o = {
        .mask = SCHED_MASK_FULL,
        .tiles = 8,
        .block_m = 64,
        .block_n = 64,
        .heads = 1,
        .batch = 1,
        .w = SCHED_W_DEFAULT,
        .c = 1.0,
        .r = 0.25,
        .kind = SCHED_ALL,
    };
    int opt, rc = 0, v, shape_given = 0;
    int32_t nk = 0;

    /* We print our own one-line messages. optind = 0 makes glibc's getopt start afresh,
     * whatever parsed argv before us. */
    opterr = 0;
    optind = 0;
    while (rc == 0 && (opt = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        /* getopt leaves the offending word just before optind for both error kinds */
        const char *word = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (opt) {
        case OPT_MASK:
            if ((v = sched_mask_parse(optarg)) < 0)
                rc = sched_bad("unknown mask '%s' (full or causal)", optarg);
            else
                o.mask = (enum sched_mask)v;
            break;
        case OPT_TILES:
            shape_given = 1;
            rc = parse_int("tiles", optarg, 1, INT32_MAX, &o.tiles);
            break;
        case OPT_Q_TILES:
            shape_given = 1;
            rc = parse_int("q-tiles", optarg, 1, INT32_MAX, &o.q_tiles);
            break;
        case OPT_KV_TILES:
            shape_given = 1;
            rc = parse_int("kv-tiles", optarg, 1, INT32_MAX, &o.kv_tiles);
            break;
        case OPT_WINDOW:
            rc = parse_window(optarg, &o);
            break;
        case OPT_CU:
            rc = parse_offsets("cu-seqlens", optarg, &o.cu_q, &o.nseq);
            break;
        case OPT_CU_K:
            rc = parse_offsets("cu-seqlens-k", optarg, &o.cu_k, &nk);
            break;
        case OPT_BLOCK_M:
            rc = parse_int("block-m", optarg, 1, INT32_MAX, &o.block_m);
            break;
        case OPT_BLOCK_N:
            rc = parse_int("block-n", optarg, 1, INT32_MAX, &o.block_n);
            break;
        case OPT_HEADS:
            rc = parse_int("heads", optarg, 1, INT32_MAX, &o.heads);
            break;
        case OPT_BATCH:
            shape_given = 1;
            rc = parse_int("batch", optarg, 1, INT32_MAX, &o.batch);
            break;
        case OPT_W:
            rc = parse_int("w", optarg, 1, SCHED_W_MAX, &o.w);
            break;
        case OPT_SMS:
            rc = parse_int("sms", optarg, 1, INT32_MAX, &o.sms);
            break;
        case OPT_C:
            rc = parse_cost("c", optarg, &o.c);
            break;
        case OPT_R:
            rc = parse_cost("r", optarg, &o.r);
            break;
        case OPT_SCHEDULE:
            if ((v = sched_kind_parse(optarg)) < 0)
                rc = sched_bad("unknown schedule '%s' "
                               "(atomic, ascending, descending, spt, shift or auto)", optarg);
            else
                o.kind = v;
            break;
        case OPT_JSON:
            o.json = 1;
            break;
        case OPT_DOT:
            o.dot = 1;
            break;
        case 'h':
            o.help = 1;
            break;
        case ':':
            rc = sched_bad("option '%s' needs a value", word);
            break;
        default:
            /* optopt: the short option, a long option's value when it was given a value
             * it does not take, or 0 for an unknown or ambiguous long option */
            if (optopt >= OPT_MASK)
                rc = sched_bad("option '%s' takes no value", word);
            else if (optopt > 0)
                rc = sched_bad("unknown option '-%c'", optopt);
            else
                rc = sched_bad("unknown or ambiguous option '%s'", word);
            break;
        }
    }
    if (!rc && o.cu_k && !o.cu_q)
        rc = sched_bad("--cu-seqlens-k needs --cu-seqlens");
    if (!rc && o.cu_k && nk != o.nseq)
        rc = sched_bad("--cu-seqlens-k lists %d sequences, --cu-seqlens %d", nk, o.nseq);
    if (!rc && o.cu_q && shape_given)
        rc = sched_bad("--cu-seqlens gives the lengths: drop --tiles, --q-tiles, --kv-tiles "
                       "and --batch");
    if (!rc && o.cu_q && o.dot)
        rc = sched_bad("--dot draws one shape, not a packed batch");
    if (rc) {
        free(o.cu_q);
        free(o.cu_k);
        return rc;
    }
    if (o.cu_q && !o.cu_k) {
        o.cu_k = malloc(sizeof(int32_t) * ((size_t)o.nseq + 1));
        if (!o.cu_k) {
            free(o.cu_q);
            return sched_bad("%s", dash_strerror(-ENOMEM));
        }
        memcpy(o.cu_k, o.cu_q, sizeof(int32_t) * ((size_t)o.nseq + 1));
    }
    if (o.help) {
        *ret = o;
        return 0;
    }
    if (optind < argc || (o.json && o.dot)) {
        free(o.cu_q);
        free(o.cu_k);
        if (optind < argc)
            return sched_bad("unexpected argument '%s'", argv[optind]);
        return sched_bad("--json and --dot cannot be combined");
    }

    if (!o.q_tiles)
        o.q_tiles = o.tiles;
    if (!o.kv_tiles)
        o.kv_tiles = o.tiles;
    if (!o.sms)
        o.sms = o.w;
    /* sched_init() sees only the sequence lengths, so their overflow is ours to catch. */
    if ((int64_t)o.q_tiles * o.block_m > INT32_MAX || (int64_t)o.kv_tiles * o.block_n > INT32_MAX)
        return sched_bad("sequence length (tiles x block rows): %s", dash_strerror(-EOVERFLOW));
    /* The model walks every (q-tile, kv-tile) pair of every head, about 1 us each here:
     * past SCHED_CTL_MAX_PAIRS it would run for minutes or run out of memory, so it says
     * so instead (counted in double: the product may be far past int64). */
    double pairs = 0;
    if (o.cu_q)
        for (int32_t i = 0; i < o.nseq; i++)
            pairs += ceil((double)(o.cu_q[i + 1] - o.cu_q[i]) / o.block_m) *
                     ceil((double)(o.cu_k[i + 1] - o.cu_k[i]) / o.block_n);
    else
        pairs = (double)o.batch * o.q_tiles * o.kv_tiles;
    pairs *= o.heads;
    if (pairs > SCHED_CTL_MAX_PAIRS) {
        free(o.cu_q);
        free(o.cu_k);
        return sched_bad("%.0f tile pairs (q-tiles x kv-tiles x heads, summed over the batch) are more than "
                         "dashctl sched models (%d, a few seconds): fewer tiles, heads or sequences, or "
                         "larger --block-m/--block-n",
                         pairs, SCHED_CTL_MAX_PAIRS);
    }
    *ret = o;
    return 0;
}

/* ---- modelling -------------------------------------------------------------------- */

static struct sched_shape shape_of(const struct sched_opts *o)
{
    return (struct sched_shape){
        .batch = o->batch,
        .heads = o->heads,
        .seqlen_q = o->q_tiles * o->block_m,
        .seqlen_k = o->kv_tiles * o->block_n,
        .block_m = o->block_m,
        .block_n = o->block_n,
        .mask = o->mask,
        .window = o->window,
        .window_left = o->window_left,
        .window_right = o->window_right,
    };
}

/* Sequence b of a packed batch as a shape (batch 1). */
static struct sched_shape seq_shape(const struct sched_opts *o, int32_t b)
{
    struct sched_shape sh;
    memset(&sh, 0, sizeof sh); /* dag_auto's cache compares padding too */
    sh = shape_of(o);
    sh.batch = 1;
    sh.seqlen_q = o->cu_q[b + 1] - o->cu_q[b];
    sh.seqlen_k = o->cu_k[b + 1] - o->cu_k[b];
    return sh;
}

/* SMs beyond the job count never take a job, so the DAG on min(sms, jobs) SMs is the same
 * DAG; clamping keeps a huge --sms from allocating per-SM state for nothing. */
static int32_t modelled_sms(const struct sched *s, int32_t sms)
{
    return sms < s->jobs ? sms : s->jobs;
}

/* The stats of a schedule the model found deadlocked (dag_model() and dag_model_seqs() leave
 * them alone then) over its n sequences: the additions are still known, and every one costs
 * c + r - summed one by one, as the model does, so a deadlocked schedule reports the same
 * bits as the others. */
static void deadlock_stats(const struct sched *seqs, int32_t n, double c, double r, struct dag_stats *st)
{
    memset(st, 0, sizeof *st);
    for (int32_t q = 0; q < n; q++)
        for (int32_t t = 0; t < seqs[q].n_tiles; t++)
            st->additions += (int64_t)seqs[q].bh * sched_unit_steps(&seqs[q], t);
    for (int64_t i = 0; i < st->additions; i++)
        st->work += c + r;
}

/* Fill the grids of head 0 and model the schedule. Returns 0 (deadlock included) or a
 * negative code. */
static int sched_row_model(struct sched_row *row, int32_t sms, double c, double r)
{
    const struct sched *s = &row->s;
    size_t M = (size_t)s->m_tiles, N = (size_t)s->n_tiles;
    if (M > SIZE_MAX / sizeof(int32_t) / N)
        return -ENOMEM;
    row->visits = malloc(sizeof(int32_t) * M * N);
    row->orders = malloc(sizeof(int32_t) * M * N);
    if (!row->visits || !row->orders)
        return -ENOMEM; /* the caller frees both */
    memset(row->visits, 0xff, sizeof(int32_t) * M * N);
    memset(row->orders, 0xff, sizeof(int32_t) * M * N);

    for (int32_t j = 0; j < s->jobs; j++) {
        struct sched_job J = sched_job_at(s, j);
        if (J.bh != 0)
            continue;
        for (int32_t st = 0; st < sched_job_stages(s, J.k); st++) {
            int32_t n = sched_job_unit(s, J.k, st);
            for (int32_t step = 0; step < sched_unit_steps(s, n); step++) {
                int32_t m = sched_visit(s, &J, st, step);
                row->visits[(size_t)n * M + (size_t)step] = m;
                int32_t rank = sched_rank(s, &J, st, m);
                if (rank < 0)
                    continue; /* atomic: no order */
                assert(rank < sched_contributors(s, m));
                row->orders[(size_t)m * N + (size_t)rank] = n;
            }
        }
    }

    int rc = dag_model(s, modelled_sms(s, sms), c, r, NULL, NULL, &row->st);
    if (rc == -EDEADLK) {
        row->deadlock = 1;
        deadlock_stats(s, 1, c, r, &row->st);
        rc = 0;
    }
    return rc;
}

static void sched_row_free(struct sched_row *row)
{
    free(row->visits);
    free(row->orders);
    row->visits = NULL;
    row->orders = NULL;
}

/* ---- output ----------------------------------------------------------------------- */

/* The shortest of %g, %.7g, ..., %.17g that reads back as x, so 11.75 prints as 11.75
 * and a JSON reader recovers the model's exact double. x is finite (costs are checked,
 * and makespans and work are sums of them). */
static const char *fmt_num(char buf[32], double x)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

/* Text is for reading: ten significant digits hide the last-bit noise of sums such as
 * 0.1 + 0.07 + ... that fmt_num() would spell out in full. */
static const char *fmt_text(char buf[32], double x)
{
    snprintf(buf, 32, "%.10g", x);
    return buf;
}

static int digits(int32_t v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

static void print_visits_text(const struct sched_row *row)
{
    const struct sched *s = &row->s;
    int32_t M = s->m_tiles, N = s->n_tiles;
    int cw = digits((M > N ? M : N) - 1);
    int lw = digits(M - 1) + 6; /* "step " + number + ":" */
    if (lw < 8)
        lw = 8;                 /* "kv-tile:" */

    printf("  visits, head 0: the q-tile each kv-tile (column) visits at each step (row)\n");
    printf("    %-*s", lw, "kv-tile:");
    for (int32_t n = 0; n < N; n++)
        printf(" %*d", cw, n);
    printf("\n");
    for (int32_t step = 0; step < M; step++) {
        /* trailing units that have no such step would only add trailing blanks */
        int32_t last = -1;
        for (int32_t n = 0; n < N; n++)
            if (step < sched_unit_steps(s, n))
                last = n;
        if (last < 0)
            break;
        printf("    step %*d:", lw - 6, step);
        for (int32_t n = 0; n <= last; n++) {
            if (step < sched_unit_steps(s, n))
                printf(" %*d", cw, row->visits[(size_t)n * M + (size_t)step]);
            else
                printf(" %*s", cw, "");
        }
        printf("\n");
    }
}

static void print_orders_text(const struct sched_row *row)
{
    const struct sched *s = &row->s;
    int32_t M = s->m_tiles, N = s->n_tiles;
    if (!sched_is_deterministic(s->kind)) {
        printf("  order, head 0: any order (atomic adds race, so sums are not reproducible)\n");
        return;
    }
    int cw = digits((M > N ? M : N) - 1);
    int lw = digits(M - 1) + 8; /* "q-tile " + number + ":" */

    printf("  order, head 0: the kv-tiles in the order their dQ partials are added, per q-tile\n");
    printf("    %-*s", lw, "rank:");
    for (int32_t i = 0; i < N; i++)
        printf(" %*d", cw, i);
    printf("\n");
    for (int32_t m = 0; m < M; m++) {
        int32_t k = sched_contributors(s, m);
        printf("    q-tile %*d:", lw - 8, m);
        if (k == 0)
            printf(" (sees no key)");
        for (int32_t i = 0; i < k; i++)
            printf(" %*d", cw, row->orders[(size_t)m * N + (size_t)i]);
        printf("\n");
    }
}

static void print_makespan_text(const char *name, const struct sched_row *row,
                                const struct sched_opts *o)
{
    char a[32], b[32];
    if (row->deadlock)
        printf("%s: deadlock: cannot finish on %d SMs", name, o->sms);
    else
        printf("%s: makespan %s", name, fmt_text(a, row->st.makespan));
    /* only SMs that can get a job count towards the bound */
    printf("  (work bound %s)", fmt_text(b, row->st.work / modelled_sms(&row->s, o->sms)));
}

static void print_text(const struct sched_opts *o, const struct sched_row *rows, int auto_on,
                       enum sched_kind auto_kind)
{
    char c[32], r[32];
    printf("shape: mask %s, q-tiles %d x %d rows, kv-tiles %d x %d rows, heads %d, batch %d; "
           "W %d, SMs %d, c %s, r %s\n",
           sched_mask_name(o->mask), o->q_tiles, o->block_m, o->kv_tiles, o->block_n, o->heads,
           o->batch, o->w, o->sms, fmt_text(c, o->c), fmt_text(r, o->r));
    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
        if (!rows[k].on)
            continue;
        printf("\n");
        print_makespan_text(sched_kind_name((enum sched_kind)k), &rows[k], o);
        printf("\n");
        print_visits_text(&rows[k]);
        print_orders_text(&rows[k]);
    }
    if (auto_on) {
        printf("\n");
        print_makespan_text("auto", &rows[auto_kind], o);
        printf("  -> %s, the fastest deterministic schedule modelled on W = %d SMs\n",
               sched_kind_name(auto_kind), o->w);
    }
}

/* A list of int32 lists as one JSON line: [[a,b],[c],[]]. */
static void print_lists_json(const int32_t *base, size_t stride, int32_t lists,
                             int32_t (*len)(const struct sched *, int32_t), const struct sched *s,
                             int empty)
{
    printf("[");
    for (int32_t i = 0; i < lists; i++) {
        printf(i ? ",[" : "[");
        int32_t k = empty ? 0 : len(s, i);
        for (int32_t x = 0; x < k; x++)
            printf(x ? ",%d" : "%d", base[(size_t)i * stride + (size_t)x]);
        printf("]");
    }
    printf("]");
}

static void print_json(const struct sched_opts *o, const struct sched_row *rows, int auto_on,
                       enum sched_kind auto_kind)
{
    char a[32], b[32];
    printf("{\n  \"shape\": {\"mask\": \"%s\", \"q_tiles\": %d, \"kv_tiles\": %d, "
           "\"block_m\": %d, \"block_n\": %d, \"heads\": %d, \"batch\": %d, \"w\": %d, "
           "\"sms\": %d, \"c\": %s, \"r\": %s}",
           sched_mask_name(o->mask), o->q_tiles, o->kv_tiles, o->block_m, o->block_n, o->heads,
           o->batch, o->w, o->sms, fmt_num(a, o->c), fmt_num(b, o->r));
    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
        const struct sched_row *row = &rows[k];
        if (!row->on)
            continue;
        printf(",\n  \"%s\": {\"makespan\": %s, \"deadlock\": %s, \"work\": %s,\n"
               "    \"visits\": ",
               sched_kind_name((enum sched_kind)k),
               row->deadlock ? "null" : fmt_num(a, row->st.makespan),
               row->deadlock ? "true" : "false", fmt_num(b, row->st.work));
        print_lists_json(row->visits, (size_t)row->s.m_tiles, row->s.n_tiles, sched_unit_steps,
                         &row->s, 0);
        printf(",\n    \"orders\": ");
        print_lists_json(row->orders, (size_t)row->s.n_tiles, row->s.m_tiles, sched_contributors,
                         &row->s, !sched_is_deterministic(row->s.kind));
        printf("}");
    }
    if (auto_on) {
        const struct sched_row *row = &rows[auto_kind];
        printf(",\n  \"auto\": {\"chosen\": \"%s\", \"makespan\": %s}", sched_kind_name(auto_kind),
               row->deadlock ? "null" : fmt_num(a, row->st.makespan));
    }
    printf("\n}\n");
}

/* DOT goes through a memory stream: dag_write_dot() starts writing before it knows whether
 * the schedule completes, and a half graph on stdout is worse than none. */
static int print_dot(const struct sched_opts *o, const struct sched *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    if (!mf) {
        fprintf(stderr, "dashctl sched: %s\n", dash_strerror(-ENOMEM));
        return CTL_EXIT_FAIL;
    }
    int rc = dag_write_dot(mf, s, modelled_sms(s, o->sms), o->c, o->r);
    if (fclose(mf) != 0 && rc == 0)
        rc = -ENOMEM;
    if (rc == 0)
        fwrite(buf, 1, len, stdout); /* errors surface in main()'s check of stdout */
    free(buf);
    if (rc == -EDEADLK) {
        fprintf(stderr, "dashctl sched: %s cannot finish on %d SMs (%s); no graph to draw\n",
                sched_kind_name(s->kind), o->sms, dash_strerror(rc));
        return CTL_EXIT_FAIL;
    }
    if (rc) {
        fprintf(stderr, "dashctl sched: %s: %s\n", sched_kind_name(s->kind), dash_strerror(rc));
        return CTL_EXIT_FAIL;
    }
    return CTL_EXIT_OK;
}

/* A packed batch: every schedule's makespan on the batch (dag_model_seqs), and auto as a
 * plain and as a batch-invariant request resolve it. Sequences without queries or keys have
 * no jobs (the engine's rule) and are left out of the model. */
static int sched_packed(const struct sched_opts *o)
{
    struct sched *seqs = malloc(sizeof(struct sched) * (size_t)o->nseq);
    int32_t n = 0, rc, status = CTL_EXIT_FAIL;
    struct dag_stats st[SCHED_KIND_COUNT]; /* by kind; [SCHED_AUTO] unused */
    int deadlock[SCHED_KIND_COUNT] = {0};
    int64_t jobs[SCHED_KIND_COUNT] = {0}; /* by kind: all sequences' */
    enum sched_kind auto_kind = SCHED_ASCENDING, inv_kind = SCHED_ASCENDING;
    if (!seqs) {
        fprintf(stderr, "dashctl sched: %s\n", dash_strerror(-ENOMEM));
        return CTL_EXIT_FAIL;
    }
    int32_t pick = dag_auto_packed_seq(o->cu_q, o->cu_k, o->nseq);
    struct sched_shape ash = pick >= 0 ? seq_shape(o, pick) : shape_of(o);
    if (pick < 0) {
        fprintf(stderr, "dashctl sched: no sequence has both queries and keys\n");
        goto out;
    }
    struct sched_shape ref = shape_of(o);
    dag_auto_packed_ref(&ref);
    if ((rc = dag_auto(&ash, o->w, &auto_kind)) != 0 || (rc = dag_auto(&ref, o->w, &inv_kind)) != 0) {
        fprintf(stderr, "dashctl sched: auto: %s\n", dash_strerror(rc));
        goto out;
    }
    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
        n = 0;
        for (int32_t b = 0; b < o->nseq; b++) {
            struct sched_shape sh = seq_shape(o, b);
            if (sh.seqlen_q == 0 || sh.seqlen_k == 0)
                continue;
            if ((rc = sched_init(&seqs[n++], (enum sched_kind)k, &sh, o->w)) != 0) {
                status = sched_bad("sequence %d: %s", b, dash_strerror(rc));
                goto out;
            }
            jobs[k] += seqs[n - 1].jobs;
        }
        rc = dag_model_seqs(seqs, n, o->sms, o->c, o->r, NULL, NULL, &st[k]);
        deadlock[k] = rc == -EDEADLK;
        if (deadlock[k])
            deadlock_stats(seqs, n, o->c, o->r, &st[k]);
        if (rc && !deadlock[k]) {
            fprintf(stderr, "dashctl sched: modelling %s: %s\n",
                    sched_kind_name((enum sched_kind)k), dash_strerror(rc));
            goto out;
        }
        if (!deadlock[k] && !isfinite(st[k].work)) {
            status = sched_bad(COSTS_OVERFLOW, o->c, o->r);
            goto out;
        }
    }
    char a[32], b2[32];
    if (o->json) {
        printf("{\n  \"packed\": {\"sequences\": %d, \"cu_seqlens_q\": [", o->nseq);
        for (int32_t b = 0; b <= o->nseq; b++)
            printf(b ? ",%d" : "%d", o->cu_q[b]);
        printf("], \"cu_seqlens_k\": [");
        for (int32_t b = 0; b <= o->nseq; b++)
            printf(b ? ",%d" : "%d", o->cu_k[b]);
        printf("], \"mask\": \"%s\", \"window\": [%d, %d], \"block_m\": %d, \"block_n\": %d, "
               "\"heads\": %d, \"w\": %d, \"sms\": %d, \"c\": %s, \"r\": %s}",
               sched_mask_name(o->mask), o->window ? o->window_left : -1,
               o->window ? o->window_right : -1, o->block_m, o->block_n, o->heads, o->w, o->sms,
               fmt_num(a, o->c), fmt_num(b2, o->r));
        for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
            if (o->kind != SCHED_ALL && o->kind != k && o->kind != SCHED_AUTO)
                continue;
            printf(",\n  \"%s\": {\"makespan\": %s, \"deadlock\": %s, \"additions\": %lld}",
                   sched_kind_name((enum sched_kind)k), deadlock[k] ? "null" : fmt_num(a, st[k].makespan),
                   deadlock[k] ? "true" : "false", (long long)st[k].additions);
        }
        printf(",\n  \"auto\": {\"chosen\": \"%s\", \"decided_by\": %d, "
               "\"batch_invariant\": \"%s\"}\n}\n", sched_kind_name(auto_kind), pick,
               sched_kind_name(inv_kind));
    } else {
        printf("packed batch: %d sequences (%d modelled), q rows", o->nseq, n);
        for (int32_t b = 0; b < o->nseq && b < 16; b++)
            printf(b ? ",%d" : " %d", o->cu_q[b + 1] - o->cu_q[b]);
        printf(o->nseq > 16 ? ",...; mask %s" : "; mask %s", sched_mask_name(o->mask));
        if (o->window)
            printf(", window (%d, %d)", o->window_left, o->window_right);
        printf(", tiles %dx%d rows, heads %d; W %d, SMs %d, c %s, r %s\n", o->block_m, o->block_n,
               o->heads, o->w, o->sms, fmt_text(a, o->c), fmt_text(b2, o->r));
        for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
            if (o->kind != SCHED_ALL && o->kind != k && o->kind != SCHED_AUTO)
                continue;
            if (deadlock[k])
                printf("%-10s deadlock: cannot finish on %d SMs\n", sched_kind_name((enum sched_kind)k),
                       o->sms);
            else
                /* only SMs that can get a job count towards the bound, as for one shape */
                printf("%-10s makespan %s  (work bound %s, %lld additions)\n",
                       sched_kind_name((enum sched_kind)k), fmt_text(a, st[k].makespan),
                       fmt_text(b2, st[k].work / (double)(o->sms < jobs[k] ? o->sms : jobs[k])),
                       (long long)st[k].additions);
        }
        printf("auto       -> %s (modelled on sequence %d, the one with the most work); "
               "batch-invariant auto -> %s\n", sched_kind_name(auto_kind), pick,
               sched_kind_name(inv_kind));
    }
    status = CTL_EXIT_OK;
out:
    free(seqs);
    return status;
}

/* ---- the command ------------------------------------------------------------------ */

int ctl_sched(int argc, char **argv)
{
    struct sched_opts o = {0}; /* filled by sched_parse(); zeroed so -O3 sees it set */
    struct sched_row rows[SCHED_KIND_COUNT]; /* by kind; rows[SCHED_AUTO] unused */
    int rc, status = CTL_EXIT_USAGE;

    memset(rows, 0, sizeof rows);
    if ((rc = sched_parse(argc, argv, &o)) != 0)
        return rc;
    if (o.help) {
        free(o.cu_q);
        free(o.cu_k);
        fputs(usage_text, stdout);
        return CTL_EXIT_OK;
    }
    if (o.cu_q) {
        rc = sched_packed(&o);
        free(o.cu_q);
        free(o.cu_k);
        return rc;
    }

    struct sched_shape shape = shape_of(&o);
    /* auto is modelled when listed, and when --dot has to pick the schedule it draws */
    int auto_on = o.kind == SCHED_ALL || o.kind == SCHED_AUTO;
    enum sched_kind auto_kind = SCHED_ASCENDING;
    /* Every schedule accepts the same shapes, so one probe tells a bad shape (a usage
     * error) apart from a failure of the model below. */
    struct sched probe;
    if ((rc = sched_init(&probe, SCHED_ASCENDING, &shape, o.w)) != 0)
        return sched_bad("shape rejected: %s", dash_strerror(rc));
    if (auto_on && (rc = dag_auto(&shape, o.w, &auto_kind)) != 0) {
        fprintf(stderr, "dashctl sched: auto: %s\n", dash_strerror(rc));
        return CTL_EXIT_FAIL;
    }

    if (o.dot) {
        struct sched s;
        enum sched_kind kind = auto_on ? auto_kind : (enum sched_kind)o.kind;
        if ((rc = sched_init(&s, kind, &shape, o.w)) != 0)
            return sched_bad("%s: %s", sched_kind_name(kind), dash_strerror(rc));
        return print_dot(&o, &s);
    }

    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++)
        rows[k].on = o.kind == SCHED_ALL || o.kind == k || (o.kind == SCHED_AUTO && k == (int)auto_kind);
    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
        if (rows[k].on && (rc = sched_init(&rows[k].s, (enum sched_kind)k, &shape, o.w)) != 0) {
            sched_bad("%s: %s", sched_kind_name((enum sched_kind)k), dash_strerror(rc));
            goto free_rows;
        }
    }

    status = CTL_EXIT_FAIL;
    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++) {
        if (rows[k].on && (rc = sched_row_model(&rows[k], o.sms, o.c, o.r)) != 0) {
            fprintf(stderr, "dashctl sched: modelling %s: %s\n",
                    sched_kind_name((enum sched_kind)k), dash_strerror(rc));
            goto free_rows;
        }
        /* the makespan is at most the work, so a finite work bounds every time printed */
        if (rows[k].on && !isfinite(rows[k].st.work)) {
            status = sched_bad(COSTS_OVERFLOW, o.c, o.r);
            goto free_rows;
        }
    }

    if (o.json)
        print_json(&o, rows, auto_on, auto_kind);
    else
        print_text(&o, rows, auto_on, auto_kind);
    status = CTL_EXIT_OK;

free_rows:
    for (int k = SCHED_ATOMIC; k < SCHED_KIND_COUNT; k++)
        sched_row_free(&rows[k]);
    return status;
}
