// SPDX-License-Identifier: BSD-3-Clause
/*
 * auditfile.c - see auditfile.h.
 */
#include "auditfile.h"

#include "crc32c.h"

#include <errno.h>
#include <pthread.h>
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

/* ---- CRC-32C of any stretch from running CRCs ----------------------------------------- */

#define CRC_POLY 0x82F63B78u /* reflected, as crc32c.c */

/* a * b modulo the CRC polynomial, in the reflected representation (x^0 is bit 31). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return p;
}

/* x^(8n) mod p for n <= AUDITFILE_FRAME_MAX: crc(A || B) = x^(8|B|) * crc(A) ^ crc(B). */
static uint32_t *xpow8;
static pthread_once_t xpow8_once = PTHREAD_ONCE_INIT;

static void xpow8_init(void)
{
    uint32_t *t = malloc(((size_t)AUDITFILE_FRAME_MAX + 1) * sizeof *t);
    if (!t)
        return;
    t[0] = 1u << 31;
    for (size_t n = 1; n <= AUDITFILE_FRAME_MAX; n++)
        t[n] = multmodp(t[n - 1], 1u << 23); /* x^8 */
    xpow8 = t;
}

/* Have r->crc cover data[.., end]; 0 or -ENOMEM. The window starts at from (<= every
 * offset asked for from now on); what lies before it is dropped. */
static int crc_extend(struct auditfile_reader *r, size_t from, size_t end)
{
    if (r->crc_len == 0 || from < r->crc_base || from >= r->crc_base + r->crc_len) {
        r->crc_base = from;
        r->crc_len = 0;
    } else if (from - r->crc_base > r->crc_len / 2) {
        size_t drop = from - r->crc_base;
        memmove(r->crc, r->crc + drop, (r->crc_len - drop) * sizeof *r->crc);
        r->crc_base = from;
        r->crc_len -= drop;
    }
    size_t need = end - r->crc_base + 1;
    if (need > r->crc_cap) {
        size_t cap = r->crc_cap ? r->crc_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint32_t *c = realloc(r->crc, cap * sizeof *c);
        if (!c)
            return -ENOMEM;
        r->crc = c;
        r->crc_cap = cap;
    }
    if (r->crc_len == 0)
        r->crc[r->crc_len++] = 0; /* the CRC of nothing */
    while (r->crc_len < need) {
        size_t i = r->crc_base + r->crc_len - 1;
        r->crc[r->crc_len] = crc32c(r->crc[r->crc_len - 1], r->data + i, 1);
        r->crc_len++;
    }
    return 0;
}

/* Whether the frame of length len at q has a matching CRC, from the running CRCs. */
static int crc_matches(struct auditfile_reader *r, size_t q, uint32_t len)
{
    const unsigned char *p = r->data + q;
    uint32_t c_len = crc32c(0, p, 4);
    uint32_t s = r->crc[q + 8 - r->crc_base], e = r->crc[q + 8 + len - r->crc_base];
    /* crc(len bytes || payload) = x^(8 len) (crc(len bytes) ^ crc(data[base, q+8))) ^
     * crc(data[base, q+8+len)), crc being linear past its conditioning */
    return (multmodp(xpow8[len], c_len ^ s) ^ e) == get_le32(p + 4);
}

void auditfile_reader_init(struct auditfile_reader *r, const unsigned char *data, size_t size)
{
    memset(r, 0, sizeof *r);
    r->data = data;
    r->size = size;
}

void auditfile_reader_free(struct auditfile_reader *r)
{
    free(r->crc);
    r->crc = NULL;
    r->crc_len = r->crc_cap = 0;
}

int auditfile_read(struct auditfile_reader *r, struct auditfile_item *it)
{
    const unsigned char *data = r->data;
    const size_t size = r->size, pos = r->pos;
    memset(it, 0, sizeof *it);
    it->offset = pos;
    if (pos >= size) {
        it->kind = AUDITFILE_END;
        return 0;
    }
    size_t len;
    Dash__AuditFrame *f = frame_at(data, size, pos, &len);
    if (f) {
        it->kind = f->body_case == DASH__AUDIT_FRAME__BODY_HEADER ? AUDITFILE_HEADER
                                                                 : AUDITFILE_RECORD;
        it->frame = f;
        it->length = len;
        r->pos += len;
        return 0;
    }
    (void)pthread_once(&xpow8_once, xpow8_init);
    if (!xpow8)
        return -ENOMEM;
    for (size_t q = pos + 1; q + 8 <= size; q++) {
        /* cheap tests first: a plausible length, then the CRC from the running CRCs; only a
         * matching frame is read again (to decode it) */
        uint32_t l = get_le32(data + q);
        if (l == 0 || l > AUDITFILE_FRAME_MAX || l > size - q - 8)
            continue;
        /* the running CRCs from q on suffice (crc_matches combines two of them), so the
         * window slides with q: memory stays O(AUDITFILE_FRAME_MAX), not O(the stretch) */
        if (crc_extend(r, q, q + 8 + l) != 0)
            return -ENOMEM;
        if (!crc_matches(r, q, l))
            continue;
        Dash__AuditFrame *g = frame_at(data, size, q, &len);
        if (g) {
            dash__audit_frame__free_unpacked(g, NULL);
            it->kind = AUDITFILE_CORRUPT;
            it->length = q - pos;
            r->pos = q;
            return 0;
        }
    }
    it->kind = AUDITFILE_TORN;
    it->length = size - pos;
    r->pos = size;
    return 0;
}

void auditfile_item_free(struct auditfile_item *it)
{
    if (it->frame)
        dash__audit_frame__free_unpacked(it->frame, NULL);
    it->frame = NULL;
}

/* A header frame is a few hundred bytes: its payload is field 1 of AuditFrame (tag 0x0a). */
#define HEADER_FRAME_MAX 4096
#define HEADER_TAG 0x0a

int auditfile_torn_header(const unsigned char *data, size_t size)
{
    if (size < 4) /* part of a length below HEADER_FRAME_MAX, the rest unwritten */
        return (size < 2 || data[1] < HEADER_FRAME_MAX >> 8) && (size < 3 || data[2] == 0);
    uint32_t len = get_le32(data);
    if (len < 2 || len > HEADER_FRAME_MAX || (size_t)len + 8 <= size)
        return 0;
    return size <= 8 || data[8] == HEADER_TAG;
}
