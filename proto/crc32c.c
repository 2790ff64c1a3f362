// SPDX-License-Identifier: BSD-3-Clause
/*
 * crc32c.c - see crc32c.h. A byte-at-a-time table: the audit writer checksums a few
 * kilobytes per record, far below what would make a faster method matter.
 */
#include "crc32c.h"

#include <pthread.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t crc32c(uint32_t crc, const void *p, size_t n)
{
    (void)pthread_once(&table_once, table_init);
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
