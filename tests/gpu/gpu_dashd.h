// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_dashd.h - the end-to-end suite of the GPU runner: dashd --backend cuda serving CUDA
 * buffers through libdash (tests/gpu/test_dashd_gpu.c, which registers it, with
 * test_dashd_stream_gpu.c and test_dashd_requests_gpu.c; gpu_dashd_int.h).
 */
#ifndef DASH_GPU_DASHD_H
#define DASH_GPU_DASHD_H

/* Registers suite gpu_dashd; 0, or -1 if CUnit failed. Call with a usable GPU only. */
int suite_gpu_dashd(void);

/* The runner's `--dashd-child MODE ENDPOINT SEED ARG` entry: a client process of the suite
 * (fork+exec'd, so it has its own CUDA context). Returns the exit status. */
int gpu_dashd_child(int argc, char **argv);

#endif
