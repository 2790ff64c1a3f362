// SPDX-License-Identifier: BSD-3-Clause
/*
 * auditfile.h - the audit log's file format: frames, and a reader that classifies every
 * byte of a file (docs/audit.md).
 *
 *   frame  = u32 length (little-endian) | u32 CRC32C(length bytes, payload) | payload
 *   payload = a dash.AuditFrame (proto/audit.proto): a header or a record
 *
 * The CRC covers the length too, so a torn or corrupted length is caught like torn or
 * corrupted contents. A frame counts as valid only if its length is sane (1 ..
 * AUDITFILE_FRAME_MAX), it lies inside the file, its CRC matches and its payload decodes;
 * nothing else is ever reported as a header or record. After an invalid frame the reader
 * looks for the next valid one byte by byte: if there is one, the bytes in between are
 * CORRUPT; if not, the rest of the file is a TORN tail (an interrupted last write).
 */
#ifndef DASH_AUDITFILE_H
#define DASH_AUDITFILE_H

#include "proto/audit.pb-c.h"

#include <stddef.h>
#include <stdint.h>

#define AUDITFILE_FRAME_MAX (256u * 1024u) /* payload bytes; records are ~1 KiB */
#define AUDITFILE_FORMAT_VERSION 1

/* Encode f as one frame into a malloc'd buffer. 0 and *ret_buf, *ret_len; or -ENOMEM,
 * -EMSGSIZE (payload over AUDITFILE_FRAME_MAX). */
int auditfile_encode(const Dash__AuditFrame *f, unsigned char **ret_buf, size_t *ret_len);

enum auditfile_kind {
    AUDITFILE_END,     /* nothing left */
    AUDITFILE_HEADER,  /* frame->header */
    AUDITFILE_RECORD,  /* frame->record */
    AUDITFILE_CORRUPT, /* [offset, offset + length) is not valid frames; valid ones follow */
    AUDITFILE_TORN,    /* [offset, end of file) holds no valid frame */
};

struct auditfile_item {
    enum auditfile_kind kind;
    uint64_t offset, length; /* where in the file (for HEADER/RECORD: the whole frame) */
    Dash__AuditFrame *frame; /* HEADER/RECORD: free with auditfile_item_free */
};

/* A reader over data[0..size) (a mapped file). The search for the next valid frame after
 * an invalid one is linear in the bytes searched: a frame's CRC at any candidate offset is
 * computed from running CRCs of the stretch (CRC-32C's combine), not by reading the
 * candidate's payload again, so a damaged tail of plausible lengths costs O(its size),
 * not O(its size x AUDITFILE_FRAME_MAX). The reader keeps those running CRCs for a
 * window that slides with the search (4 bytes per byte of it, at most about 2 x
 * AUDITFILE_FRAME_MAX bytes of it), so a damaged or foreign file of any size is searched
 * in bounded memory. */
struct auditfile_reader {
    const unsigned char *data;
    size_t size, pos;
    uint32_t *crc;  /* crc[i - crc_base]: CRC-32C of data[crc_base, i) */
    size_t crc_base, crc_len, crc_cap;
};

void auditfile_reader_init(struct auditfile_reader *r, const unsigned char *data, size_t size);

/* The next item, advancing past it. Returns 0 (the item; kind END at the end) or -ENOMEM. */
int auditfile_read(struct auditfile_reader *r, struct auditfile_item *it);

/* Frees the running CRCs; the data stays the caller's. */
void auditfile_reader_free(struct auditfile_reader *r);

void auditfile_item_free(struct auditfile_item *it);

/* Whether data[0..size), holding no valid frame, looks like a header frame cut short by
 * a crash while it was written (a plausible header length that runs past the end, and
 * what there is of the payload starts as a header does): 1 or 0. A file that fails this
 * and has no valid header first is not an audit log. */
int auditfile_torn_header(const unsigned char *data, size_t size);

#endif
