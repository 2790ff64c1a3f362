// SPDX-License-Identifier: BSD-3-Clause
/*
 * memcap.h - how much memory dashd may use: the machine's RAM, or less where a cgroup
 * (systemd's MemoryMax=, a container's limit) says so.
 *
 * One op's scratch is capped at half of this (DASH_ENOMEM beyond), so that a request whose
 * broadcast (stride-0) inputs are far larger dense than in their buffers is refused with an
 * answer instead of getting the daemon OOM-killed. The cgroup limit is the smallest of the
 * memory controller's limits on the path from dashd's cgroup to the root: memory.max
 * (cgroup v2) or memory.limit_in_bytes (v1), read from /proc/self/cgroup and
 * /sys/fs/cgroup.
 */
#ifndef DASHD_MEMCAP_H
#define DASHD_MEMCAP_H

#include <stddef.h>
#include <stdint.h>

/* The memory dashd may use, in bytes, and in why what set it ("RAM" or "cgroup <path>").
 * UINT64_MAX if neither can be read. */
uint64_t memcap_bytes(char *why, size_t whylen);

#endif
