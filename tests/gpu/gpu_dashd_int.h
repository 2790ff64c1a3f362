// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_dashd_int.h - what the three files of suite gpu_dashd share: the problem (its sizes,
 * its tensors' slots and where they live in the view), the suite's fixture and its dashd,
 * and the tests test_dashd_gpu.c registers of the other two. Private to the three:
 *
 *   test_dashd_gpu.c           the fixture (all of its section below), the children,
 *                              client processes, the daemon's own restarts, and the
 *                              suite's registration (the order its tests run in)
 *   test_dashd_stream_gpu.c    stream-ordered ops: semaphores and events, the poison of a
 *                              failed op, ops in flight when dashd dies
 *   test_dashd_requests_gpu.c  what dashd serves and refuses: raw RegisterBuffer and
 *                              RegisterEvents, bounds, views, float64, configurations, head
 *                              dims, windows, softcap and packed batches
 */
#ifndef DASH_GPU_DASHD_INT_H
#define DASH_GPU_DASHD_INT_H

#include "../harness.h"
#include "../../client/dash.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the problem and where its tensors live ------------------------------------------ */

#define SEQ 200
#define HQ 4
#define HKV 2
#define HD 64
#define ES 2 /* bf16 */
#define QB ((size_t)SEQ * HQ * HD * ES)
#define KB ((size_t)SEQ * HKV * HD * ES)
#define LB ((size_t)HQ * SEQ * sizeof(float))
#define ALLOC_BYTES ((size_t)4 << 20) /* 2 MiB-aligned, as the CUDA guide advises for IPC */
#define VIEW_OFF ((size_t)3 * 4096 + 256) /* where the registered view starts */
#define NSCHED 2
#define EVRING_TEST_MANY 257 /* one more event than a session may hold */

enum { Q, K, V, OUT, LSE, DOUT, DQ, DK, DV, SLOTS };

static const size_t slot_bytes[SLOTS] = {QB, KB, KB, QB, LB, QB, QB, KB, KB};

struct inputs; /* test_dashd_gpu.c's: the problem's inputs, host side */

struct tensors {
    struct dash_tensor t[SLOTS];
};

/* One allocation, the view registered from VIEW_OFF. */
struct fixture {
    struct dash_client *c;
    unsigned char *alloc;
    struct dash_buffer *b;
};

/* ---- test_dashd_gpu.c: the fixture --------------------------------------------------- */

/* The tensors' byte offsets in the view, and the view's size (set by the suite's init). */
extern uint64_t gpu_dashd_off[SLOTS];
extern uint64_t gpu_dashd_view_bytes;
/* The suite's dashd, the inputs' seed, the inputs, and the in-process kernels' bits
 * (gpu_dashd_result_bytes() of them), all set by the suite's init. */
extern struct dashd_proc gpu_dashd_D;
extern uint64_t gpu_dashd_seed;
extern struct inputs *gpu_dashd_inputs;
extern unsigned char *gpu_dashd_expected;
/* DASH_CONNECT_* for the next gpu_dashd_connect_client() (and so gpu_dashd_fixture_open). */
extern unsigned gpu_dashd_connect_flags;

/* The bytes of one run's results, host side: out | lse | (dq | dk | dv) per schedule. */
size_t gpu_dashd_result_bytes(void);
/* Poison n bytes (0xff) of device memory or, for a shared-memory buffer, host memory. */
cudaError_t gpu_dashd_set_ff(unsigned char *p, size_t n);
/* Poison the whole view, copy the inputs in, wait for the device. 0 or -1. */
int gpu_dashd_view_load(unsigned char *view, const struct inputs *in);
/* Copy the view's tensor `slot` to dst. 0 or -1. */
int gpu_dashd_fetch(unsigned char *dst, const unsigned char *view, int slot);
/* Poison dq, dk and dv in the view, wait for the device. 0 or -1. */
int gpu_dashd_poison_grads(unsigned char *view);
/* The suite's tensors on buffer b, at gpu_dashd_off[]. */
struct tensors gpu_dashd_tensors_of(struct dash_buffer *b);
/* The forward and both backwards through dashd (synchronous calls) on b, whose data is
 * the view, into res (gpu_dashd_result_bytes()). 0, or the failing code with why. */
int gpu_dashd_run_through_daemon(struct dash_client *c, struct dash_buffer *b, const struct inputs *in,
                                 unsigned char *res, char *why, size_t len);
/* Which part of two results first differs, or NULL. */
const char *gpu_dashd_first_difference(const unsigned char *a, const unsigned char *b);
/* A client of the suite's dashd named name, or NULL (said on stderr). */
struct dash_client *gpu_dashd_connect_client(const char *name);
/* Connect, allocate, register the view from VIEW_OFF; the test fails fatally if any fails. */
void gpu_dashd_fixture_open(struct fixture *f, const char *name);
/* Close, wait for dashd to drop the session named name, free the memory. */
void gpu_dashd_fixture_close(struct fixture *f, const char *name);
/* The synchronous run's bits against the in-process kernels'; when: said on a failure. */
void gpu_dashd_check_bits(struct fixture *f, const char *when);
/* The stream-ordered run's bits against the in-process kernels', behind a producer that
 * waits delay_ns on the GPU (then the forward must have returned before it ended). */
void gpu_dashd_check_stream(struct fixture *f, uint64_t delay_ns, const char *when);

/* ---- test_dashd_stream_gpu.c --------------------------------------------------------- */

/* Whether the GPU has 64-bit stream memory operations, which semaphore-ordered ops need;
 * where not, said on stderr. */
int gpu_dashd_semaphores_here(void);

/* The tests of the other two files, in suite_gpu_dashd's order within each. */
void test_dashd_gpu_stream_ops_follow_the_callers_stream(void);
void test_dashd_gpu_signal_op_failure_releases_the_stream_and_is_told_later(void);
void test_dashd_gpu_late_ready_word_of_a_refused_op_does_not_stall_its_slots_next_op(void);
void test_dashd_gpu_op_done_before_its_daemon_died_is_not_sent_again(void);
void test_dashd_gpu_stream_op_on_a_capturing_stream_is_refused(void);
void test_dashd_gpu_signal_ops_reuse_every_slot_in_order(void);
void test_dashd_gpu_daemon_killed_with_signal_ops_in_flight_releases_the_stream(void);
void test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns(void);
void test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon(void);
void test_dashd_gpu_failed_stream_ops_poison_their_outputs_before_the_stream_goes_on(void);
void test_dashd_gpu_stream_op_output_past_its_buffer_is_refused_before_queueing(void);
void test_dashd_gpu_op_refused_by_a_client_limit_poisons_its_outputs(void);

/* ---- test_dashd_requests_gpu.c ------------------------------------------------------- */

void test_dashd_gpu_bounds_are_checked(void);
void test_dashd_gpu_cuda_tensors_are_the_views_of_their_allocation(void);
void test_dashd_gpu_cuda_tensors_never_evict_their_own_views(void);
void test_dashd_gpu_cuda_backend_refuses_float64_with_a_clear_error(void);
void test_dashd_gpu_garbage_handle_is_an_error_reply(void);
void test_dashd_gpu_reported_config_reproduces_the_bits(void);
void test_dashd_gpu_event_sync_errors_are_replies(void);
void test_dashd_gpu_head_dims_96_and_256_match_in_process(void);
void test_dashd_gpu_windows_softcap_and_packed_batches_run_and_other_dims_are_refused(void);
void test_dashd_gpu_cpu_backend_refuses_cuda_buffers(void);

#endif
