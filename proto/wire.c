/*
 * wire.c - decoding with a budget, encoding, and the default endpoint.
 *
 * The budget allocator puts a small header holding the block's size before every block.
 * While decoding, the header lets a failed decode give bytes back to the budget; after
 * decoding, it is all free() needs, so the budget itself lives on the decoder's stack.
 */
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct budget {
    ProtobufCAllocator base;
    size_t left;
};

struct block {
    size_t size;
    max_align_t align[]; /* keeps the payload aligned for any type */
};

static void *budget_alloc(void *data, size_t size)
{
    struct budget *b = data;
    if (size > b->left)
        return NULL;
    struct block *blk = malloc(sizeof(struct block) + size);
    if (!blk)
        return NULL;
    blk->size = size;
    b->left -= size;
    return blk->align;
}

static void budget_free(void *data, void *ptr)
{
    struct budget *b = data;
    if (!ptr)
        return;
    struct block *blk = (struct block *)((char *)ptr - offsetof(struct block, align));
    b->left += blk->size;
    free(blk);
}

/* Freeing needs no budget: it only has to find each block's header. */
static void block_free(void *data, void *ptr)
{
    (void)data;
    if (ptr)
        free((char *)ptr - offsetof(struct block, align));
}

static void *no_alloc(void *data, size_t size)
{
    (void)data;
    (void)size;
    return NULL;
}

static ProtobufCAllocator free_only = {no_alloc, block_free, NULL};

static ProtobufCMessage *decode(const ProtobufCMessageDescriptor *d, const void *data, size_t len,
                                size_t budget)
{
    struct budget b = {{budget_alloc, budget_free, NULL}, budget};
    b.base.allocator_data = &b;
    /* On failure the decoder frees what it had allocated, through b. */
    return protobuf_c_message_unpack(d, &b.base, len, data);
}

Dash__Request *wire_decode_request(const void *data, size_t len, size_t budget)
{
    return (Dash__Request *)decode(&dash__request__descriptor, data, len, budget);
}

Dash__Reply *wire_decode_reply(const void *data, size_t len, size_t budget)
{
    return (Dash__Reply *)decode(&dash__reply__descriptor, data, len, budget);
}

void wire_free_request(Dash__Request *m)
{
    if (m)
        protobuf_c_message_free_unpacked((ProtobufCMessage *)m, &free_only);
}

void wire_free_reply(Dash__Reply *m)
{
    if (m)
        protobuf_c_message_free_unpacked((ProtobufCMessage *)m, &free_only);
}

uint64_t wire_peek_id(const void *data, size_t len)
{
    const unsigned char *p = data;
    if (!p || len < 2 || p[0] != 0x08) /* field 1, wire type 0 (varint) */
        return 0;
    uint64_t id = 0;
    for (size_t i = 1; i < len && i <= 10; i++) {
        id |= (uint64_t)(p[i] & 0x7f) << (7 * (i - 1));
        if (!(p[i] & 0x80))
            return id;
    }
    return 0; /* the varint does not end: not an id */
}

int wire_encode(const ProtobufCMessage *m, void **ret_buf, size_t *ret_len)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    if (len > WIRE_MAX_MESSAGE)
        return -EMSGSIZE;
    void *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(m, buf);
    *ret_buf = buf;
    *ret_len = len;
    return 0;
}

int wire_default_endpoint(char *buf, size_t len)
{
    const char *env = getenv("DASHD_ENDPOINT");
    int n;
    if (env && *env) {
        n = snprintf(buf, len, "%s", env);
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (xdg && *xdg)
            n = snprintf(buf, len, "ipc://%s/dashd.sock", xdg);
        else
            n = snprintf(buf, len, "ipc:///tmp/dashd-%u.sock", (unsigned)getuid());
    }
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    const char *path = wire_ipc_path(buf);
    if (path && strlen(path) > 107)
        return -ENAMETOOLONG;
    return 0;
}

int wire_client_endpoint(char *buf, size_t len)
{
    int rc = wire_default_endpoint(buf, len);
    if (rc || getenv("DASHD_ENDPOINT"))
        return rc;
    struct stat st;
    if (stat(wire_ipc_path(buf), &st) == 0 && S_ISSOCK(st.st_mode))
        return 0;
    if (stat(wire_ipc_path(WIRE_SYSTEM_ENDPOINT), &st) == 0 && S_ISSOCK(st.st_mode)) {
        if (strlen(WIRE_SYSTEM_ENDPOINT) >= len)
            return -ENAMETOOLONG;
        strcpy(buf, WIRE_SYSTEM_ENDPOINT);
    }
    return 0;
}

const char *wire_ipc_path(const char *endpoint)
{
    if (endpoint && strncmp(endpoint, "ipc://", 6) == 0)
        return endpoint + 6;
    return NULL;
}
