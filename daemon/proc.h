// SPDX-License-Identifier: BSD-3-Clause
/*
 * proc.h - whether a client's process is gone, by its pid (SO_PEERCRED's): what the
 * sessions (drop a dead client's session) and the CUDA backend (write a dead client's
 * ready word) ask. It reads /proc for a process that exists, so it is not for hot paths:
 * job.c's poll while the CPU engine runs keeps to kill(pid, 0) alone.
 */
#ifndef DASHD_PROC_H
#define DASHD_PROC_H

#include <stdint.h>

/* 1 when no process with this pid runs: kill(pid, 0) fails with ESRCH (EPERM: it exists,
 * as another user's), or it is a zombie (it has exited; /proc says Z or X). 0 for pid <= 0
 * (unknown) and when /proc cannot say. A pid reused since counts as the client's. */
int proc_gone(int64_t pid);

#endif
