// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_audit_int.h - what the two files of suite audit share: the problem the "training
 * script" runs (its sizes, where its tensors live in the shared-memory buffer), the
 * suite's scratch directory, and the fixture that runs dashd with a log and `dashctl
 * audit` on it; and the tests test_audit.c registers of the other file. Private to the
 * two:
 *
 *   test_audit.c        the fixture, the comparisons (diff and summary of runs, ranks,
 *                       packings, digest versions, long logs, long lists of files), and
 *                       the suite's registration (the order its tests run in)
 *   test_audit_file.c   the log files themselves: verify, SIGTERM and SIGKILL, rotation and
 *                       SIGHUP, garbage, damaged tails, foreign files, bad options, records
 *                       lost to a full file or disk or dropped by a writer behind
 */
#ifndef DASH_TEST_AUDIT_INT_H
#define DASH_TEST_AUDIT_INT_H

#include <stddef.h>
#include <stdint.h>

#define S 64
#define H 2
#define D 32
#define NT ((size_t)S * H * D) /* elements of one q-shaped tensor */
#define TB (NT * 2)            /* bf16 bytes */
#define LB ((size_t)H * S * 4)
#define STEPS 3

/* ---- test_audit.c: the fixture ------------------------------------------------------- */

/* The suite's scratch directory, made by its init and removed by its clean. */
extern char ta_dir[128];

/* Byte offset of tensor t (q k v out dout dq dk dv, then lse) in the script's buffer. */
uint64_t ta_off(int t);
/* buf = ta_dir/name. */
void ta_path_of(char *buf, size_t len, const char *name);
/* `dashctl audit <args>`: exit status, stdout in *out (may be NULL). */
int ta_dashctl(const char *args, char **out);
/* The "training script" (STEPS steps of two attention layers) against endpoint; see
 * run_script_ranked in test_audit.c. 0 or a libdash code. */
int ta_run_script(const char *endpoint, const char *run_tag, uint64_t seed, int flip_step,
                  int flip_layer, uint64_t *ret_dq_digest);
/* Start dashd with an audit log, run the script, stop it with SIGTERM. */
void ta_logged_run(const char *log, const char *extra, const char *tag, uint64_t seed,
                   int flip_step, int flip_layer, uint64_t *ret_dq_digest);
/* A file's bytes (malloc'ed) and their count, or NULL. */
unsigned char *ta_slurp(const char *path, size_t *ret_size);
/* Write n bytes to path. 0 or -1. */
int ta_spit(const char *path, const unsigned char *p, size_t n);
/* CLOCK_MONOTONIC in seconds. */
double ta_now_s(void);

/* ---- test_audit_file.c --------------------------------------------------------------- */

/* Its tests, in suite_audit's order. */
void test_audit_verify_catches_flip_truncation_and_splice(void);
void test_audit_sigterm_loses_nothing_and_sigkill_leaves_a_valid_prefix(void);
void test_audit_rotation_and_sighup_keep_one_sequence(void);
void test_audit_reader_survives_garbage(void);
void test_audit_bad_options_are_refused(void);
void test_audit_refuses_a_file_that_is_not_an_audit_log(void);
void test_audit_records_lost_to_a_full_file_are_marked_in_the_next_header(void);
void test_audit_drops_at_the_very_end_are_said_by_the_closing_header(void);
void test_audit_disk_full_at_rotation_leaves_no_headerless_file(void);
void test_audit_reader_is_linear_on_a_crafted_damaged_tail(void);
void test_audit_reader_memory_is_bounded_on_a_long_damaged_stretch(void);

#endif
