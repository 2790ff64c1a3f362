// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_audit.h - suite gpu_audit: dashd --backend cuda with an audit log
 * (tests/gpu/test_audit_gpu.c).
 */
#ifndef DASH_GPU_AUDIT_H
#define DASH_GPU_AUDIT_H

/* Registers suite gpu_audit; 0, or -1 if CUnit failed. Call with a usable GPU only. */
int suite_gpu_audit(void);

#endif
