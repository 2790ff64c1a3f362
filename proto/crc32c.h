// SPDX-License-Identifier: BSD-3-Clause
/*
 * crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of the
 * audit log's frames: chosen over CRC-32 for its better error detection on the short
 * frames we write, and because storage tools (iSCSI, ext4, LevelDB logs) use it, so its
 * check values are easy to confirm.
 */
#ifndef DASH_CRC32C_H
#define DASH_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC over n more bytes: start with crc32c(0, p, n); crc32c(crc32c(0, a, x),
 * b, y) is the CRC of a followed by b. Thread-safe. */
uint32_t crc32c(uint32_t crc, const void *p, size_t n);

#endif
