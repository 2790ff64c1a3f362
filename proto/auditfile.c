// SPDX-License-Identifier: BSD-3-Clause
/*
 * auditfile.c - see auditfile.h.
 */
#include "auditfile.h"

#include "crc32c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int auditfile_encode(const Dash__AuditFrame *f, unsigned char **ret_buf, size_t *ret_len)
{
    size_t len = protobuf_c_message_get_packed_size(&f->base);
    if (len == 0 || len > AUDITFILE_FRAME_MAX)
        return -EMSGSIZE;
    unsigned char *buf = malloc(len + 8);
    if (!buf)
        return -ENOMEM;
    put_le32(buf, (uint32_t)len);
    (void)protobuf_c_message_pack(&f->base, buf + 8);
    uint32_t crc = crc32c(crc32c(0, buf, 4), buf + 8, len);
    put_le32(buf + 4, crc);
    *ret_buf = buf;
    *ret_len = len + 8;
    return 0;
}

/* The valid frame at pos, decoded, or NULL. *ret_len: its length with the 8-byte head. */
static Dash__AuditFrame *frame_at(const unsigned char *data, size_t size, size_t pos,
                                  size_t *ret_len)
{
    if (size - pos < 8)
        return NULL;
    uint32_t len = get_le32(data + pos);
    if (len == 0 || len > AUDITFILE_FRAME_MAX || len > size - pos - 8)
        return NULL;
    if (crc32c(crc32c(0, data + pos, 4), data + pos + 8, len) != get_le32(data + pos + 4))
        return NULL;
    Dash__AuditFrame *f = dash__audit_frame__unpack(NULL, len, data + pos + 8);
    if (!f)
        return NULL;
    if (f->body_case != DASH__AUDIT_FRAME__BODY_HEADER &&
        f->body_case != DASH__AUDIT_FRAME__BODY_RECORD) {
        dash__audit_frame__free_unpacked(f, NULL);
        return NULL;
    }
    *ret_len = (size_t)len + 8;
    return f;
}

int auditfile_next(const unsigned char *data, size_t size, size_t *pos, struct auditfile_item *it)
{
    memset(it, 0, sizeof *it);
    it->offset = *pos;
    if (*pos >= size) {
        it->kind = AUDITFILE_END;
        return 0;
    }
    size_t len;
    Dash__AuditFrame *f = frame_at(data, size, *pos, &len);
    if (f) {
        it->kind = f->body_case == DASH__AUDIT_FRAME__BODY_HEADER ? AUDITFILE_HEADER
                                                                 : AUDITFILE_RECORD;
        it->frame = f;
        it->length = len;
        *pos += len;
        return 0;
    }
    for (size_t q = *pos + 1; q + 8 <= size; q++) {
        /* cheap test first: a plausible length */
        uint32_t l = get_le32(data + q);
        if (l == 0 || l > AUDITFILE_FRAME_MAX || l > size - q - 8)
            continue;
        Dash__AuditFrame *g = frame_at(data, size, q, &len);
        if (g) {
            dash__audit_frame__free_unpacked(g, NULL);
            it->kind = AUDITFILE_CORRUPT;
            it->length = q - *pos;
            *pos = q;
            return 0;
        }
    }
    it->kind = AUDITFILE_TORN;
    it->length = size - *pos;
    *pos = size;
    return 0;
}

void auditfile_item_free(struct auditfile_item *it)
{
    if (it->frame)
        dash__audit_frame__free_unpacked(it->frame, NULL);
    it->frame = NULL;
}
