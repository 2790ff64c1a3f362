// SPDX-License-Identifier: BSD-3-Clause
/*
 * wire.c - decoding with a budget, encoding, the default endpoint, and the rules that say
 * whose daemon may be behind an endpoint.
 *
 * The budget allocator puts a small header holding the block's size before every block.
 * While decoding, the header lets a failed decode give bytes back to the budget; after
 * decoding, it is all free() needs, so the budget itself lives on the decoder's stack.
 *
 * The trust rules (wire.h) look at files with lstat()/stat() and name users by uid (and
 * by name where the system knows one); they never log: the reason goes back to the caller.
 */
#include "wire.h"

#include "errors.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
            n = snprintf(buf, len, "ipc:///tmp/dashd-%u/dashd.sock", (unsigned)getuid());
    }
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    const char *path = wire_ipc_path(buf);
    if (path && strlen(path) > 107)
        return -ENAMETOOLONG;
    return 0;
}

/* A socket file at the ipc endpoint ep, or one we may not look at (EACCES). */
static int socket_there(const char *ep)
{
    struct stat st;
    if (stat(wire_ipc_path(ep), &st) == 0)
        return S_ISSOCK(st.st_mode);
    return errno == EACCES;
}

static int use_endpoint(const char *ep, char *buf, size_t len)
{
    if (strlen(ep) >= len)
        return -ENAMETOOLONG;
    strcpy(buf, ep);
    return 0;
}

int wire_client_endpoint_gpu(int gpu, char *buf, size_t len)
{
    int rc = wire_default_endpoint(buf, len);
    if (rc || getenv("DASHD_ENDPOINT"))
        return rc;
    struct stat st;
    if (stat(wire_ipc_path(buf), &st) == 0 && S_ISSOCK(st.st_mode))
        return 0;
    if (gpu >= 0) {
        char ep[64];
        snprintf(ep, sizeof ep, WIRE_GPU_ENDPOINT_FMT, gpu);
        if (socket_there(ep))
            return use_endpoint(ep, buf, len);
    }
    if (socket_there(WIRE_SYSTEM_ENDPOINT))
        return use_endpoint(WIRE_SYSTEM_ENDPOINT, buf, len);
    return 0;
}

int wire_client_endpoint(char *buf, size_t len)
{
    return wire_client_endpoint_gpu(-1, buf, len);
}

int wire_gpu_index(const char *busid, const char *dir, int *ret_index)
{
    DIR *d = opendir(dir);
    if (!d)
        return -ENOENT;
    int below = 0, found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int cmp = strcasecmp(e->d_name, busid);
        if (cmp == 0)
            found = 1;
        else if (cmp < 0)
            below++;
    }
    closedir(d);
    if (!found)
        return -ENOENT;
    *ret_index = below;
    return 0;
}

const char *wire_ipc_path(const char *endpoint)
{
    if (endpoint && strncmp(endpoint, "ipc://", 6) == 0)
        return endpoint + 6;
    return NULL;
}

/* ---- who may be behind an endpoint ------------------------------------------------------ */

/* Group and other write bits: who besides a directory's owner may create files in it. */
#define OTHERS_WRITE (S_IWGRP | S_IWOTH)
#define OTHERS_ANY (S_IRWXG | S_IRWXO)

int wire_say(int code, char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* "uid 1001 (alice)", or "uid 54321" for a uid the system has no name for. */
static const char *user_text(int64_t uid, char *buf, size_t len)
{
    struct passwd pw, *found = NULL;
    char scratch[1024];
    if (uid >= 0 && getpwuid_r((uid_t)uid, &pw, scratch, sizeof scratch, &found) == 0 && found)
        snprintf(buf, len, "uid %lld (%s)", (long long)uid, found->pw_name);
    else
        snprintf(buf, len, "uid %lld", (long long)uid);
    return buf;
}

int wire_private_dir(char *buf, size_t len)
{
    int n = snprintf(buf, len, "/tmp/dashd-%u", (unsigned)getuid());
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int wire_private_dir_check(const char *dir, uid_t uid, char *why, size_t len)
{
    struct stat st;
    char who[96], want[96];
    wire_say(0, why, len, "%s", "");
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? -ENOENT
                               : wire_say(-errno, why, len, "cannot look at %s: %s", dir, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return wire_say(DASH_EPERM, why, len,
                   "%s is a symbolic link (made by %s), not a directory: whoever made it decides "
                   "where the socket goes; remove it",
                   dir, user_text(st.st_uid, who, sizeof who));
    if (!S_ISDIR(st.st_mode))
        return wire_say(DASH_EPERM, why, len, "%s is not a directory (it belongs to %s): remove it",
                   dir, user_text(st.st_uid, who, sizeof who));
    if (st.st_uid != uid)
        return wire_say(DASH_EPERM, why, len,
                   "%s belongs to %s, not to %s: someone else made it, and could replace the "
                   "socket in it; remove it (as root) and start dashd again",
                   dir, user_text(st.st_uid, who, sizeof who), user_text(uid, want, sizeof want));
    if (st.st_mode & OTHERS_ANY)
        return wire_say(DASH_EPERM, why, len,
                   "%s has mode %04o: group and others must have no access to it (chmod 700 %s)",
                   dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

int wire_endpoint_owner(int64_t *ret_uid, char *why, size_t len)
{
    const char *env = getenv("DASHD_ENDPOINT_OWNER");
    wire_say(0, why, len, "%s", "");
    if (!env || !*env) {
        *ret_uid = -1;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (!errno && end != env && !*end && env[0] != '-' && v < (uid_t)-1) {
        *ret_uid = (int64_t)v;
        return 0;
    }
    struct passwd pw, *found = NULL;
    char scratch[1024];
    if (getpwnam_r(env, &pw, scratch, sizeof scratch, &found) == 0 && found) {
        *ret_uid = found->pw_uid;
        return 0;
    }
    return wire_say(-EINVAL, why, len, "DASHD_ENDPOINT_OWNER=%s is neither a uid nor a user name", env);
}

static int is_trusted(int64_t uid, int64_t extra)
{
    return uid == (int64_t)geteuid() || uid == 0 || (extra >= 0 && uid == extra);
}

int wire_endpoint_check(const char *endpoint, int64_t *ret_owner, char *why, size_t len)
{
    char dir[PATH_MAX], real[PATH_MAX], sock[PATH_MAX], up[PATH_MAX], priv[64];
    char who[96], other[96], flaw[2 * PATH_MAX + 256];
    struct stat d, s, p;
    int64_t extra;
    int rc;

    wire_say(0, why, len, "%s", "");
    const char *path = wire_ipc_path(endpoint);
    if (!path) {
        *ret_owner = -1;
        return 0;
    }
    if ((rc = wire_endpoint_owner(&extra, why, len)) != 0)
        return rc;
    if (path[0] == '@') {
        *ret_owner = -1;
        return 0;
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    if (!*base || dlen >= sizeof dir)
        return wire_say(-EINVAL, why, len, "%s does not name a socket file", endpoint);
    memcpy(dir, slash ? path : ".", dlen);
    dir[dlen] = '\0';

    /* The default endpoint's private directory, checked as is: a symbolic link there is
     * refused, not followed. */
    if (wire_private_dir(priv, sizeof priv) == 0 && strcmp(dir, priv) == 0) {
        rc = wire_private_dir_check(dir, getuid(), why, len);
        if (rc && rc != -ENOENT)
            return rc;
    }
    if (!realpath(dir, real)) {
        if (errno == ENOENT) { /* nothing to connect to yet; the daemon's credentials tell */
            *ret_owner = -1;
            return 0;
        }
        return wire_say(-errno, why, len, "cannot look at %s: %s", dir, strerror(errno));
    }
    if (stat(real, &d) != 0)
        return wire_say(-errno, why, len, "cannot look at %s: %s", real, strerror(errno));
    int n = snprintf(sock, sizeof sock, "%s/%s", strcmp(real, "/") ? real : "", base);
    if (n < 0 || (size_t)n >= sizeof sock)
        return wire_say(-ENAMETOOLONG, why, len, "%s: the path is too long", endpoint);
    int there = lstat(sock, &s) == 0;
    if (!there && errno != ENOENT)
        return wire_say(-errno, why, len, "cannot look at %s: %s", sock, strerror(errno));
    if (there && S_ISLNK(s.st_mode))
        return wire_say(DASH_EPERM, why, len,
                   "refusing %s: %s is a symbolic link (made by %s); connect to the socket it "
                   "points to instead",
                   endpoint, sock, user_text(s.st_uid, who, sizeof who));
    int64_t owner = there ? (int64_t)s.st_uid : (int64_t)d.st_uid;
    int others_write = (d.st_mode & OTHERS_WRITE) != 0, sticky = (d.st_mode & S_ISVTX) != 0;
    unsigned mode = (unsigned)(d.st_mode & 07777);

    /* Rule 1: a trusted user's socket in a directory others cannot tamper with. */
    if (is_trusted(owner, extra) && is_trusted(d.st_uid, extra) && (!others_write || sticky)) {
        *ret_owner = there ? owner : -1;
        return 0;
    }
    /* Rule 2: a service's socket in its own directory, made for it by root or the caller. */
    char *cut = strrchr(real, '/');
    snprintf(up, sizeof up, "%.*s", cut && cut != real ? (int)(cut - real) : 1, real);
    int up_there = strcmp(up, real) != 0 && stat(up, &p) == 0;
    int up_ok = up_there && is_trusted(p.st_uid, -1) && !(p.st_mode & OTHERS_WRITE);
    if (d.st_uid == owner && !others_write && up_ok) {
        *ret_owner = owner;
        return 0;
    }

    if (is_trusted(owner, extra)) {
        if (others_write && !sticky)
            snprintf(flaw, sizeof flaw, "%s can be written by others (mode %04o, not sticky)",
                     real, mode);
        else
            snprintf(flaw, sizeof flaw, "%s belongs to %s", real,
                     user_text(d.st_uid, other, sizeof other));
        return wire_say(DASH_EPERM, why, len,
                   "refusing %s: %s, so anyone could have put the socket %s there", endpoint,
                   flaw, sock);
    }
    if (others_write)
        snprintf(flaw, sizeof flaw, "%s lets others create files in it (mode %04o)", real, mode);
    else if (d.st_uid != owner)
        snprintf(flaw, sizeof flaw, "its directory %s belongs to %s", real,
                 user_text(d.st_uid, other, sizeof other));
    else if (up_there)
        snprintf(flaw, sizeof flaw,
                 "%s is that user's directory, but %s above it belongs to %s with mode %04o",
                 real, up, user_text(p.st_uid, other, sizeof other),
                 (unsigned)(p.st_mode & 07777));
    else
        snprintf(flaw, sizeof flaw, "%s is that user's directory", real);
    return wire_say(DASH_EPERM, why, len,
               "refusing %s: %s %s belongs to %s, not to you (uid %u) or root, and nothing "
               "vouches for it (%s); if you trust that user's daemon, set "
               "DASHD_ENDPOINT_OWNER=%lld",
               endpoint, there ? "the socket" : "the directory of", there ? sock : real,
               user_text(owner, who, sizeof who), (unsigned)geteuid(), flaw, (long long)owner);
}

int wire_peer_creds(const char *peer_address, int64_t *ret_uid, int64_t *ret_pid)
{
    if (!peer_address)
        return -ENOENT;
    /* c[0], c[1], c[2]: just after the last three colons (uid, gid, pid). */
    const char *c[3];
    int found = 0;
    for (const char *p = peer_address + strlen(peer_address); p > peer_address && found < 3; p--)
        if (p[-1] == ':')
            c[2 - found++] = p;
    if (found < 3)
        return -ENOENT;
    char *end;
    errno = 0;
    unsigned long long uid = strtoull(c[0], &end, 10);
    if (errno || end == c[0] || *end != ':')
        return -ENOENT;
    unsigned long long pid = strtoull(c[2], &end, 10);
    if (errno || end == c[2] || *end != '\0')
        return -ENOENT;
    *ret_uid = (int64_t)uid;
    *ret_pid = (int64_t)pid;
    return 0;
}

int wire_peer_check(const char *peer_address, const char *endpoint, int64_t owner, char *why,
                    size_t len)
{
    char who[96], other[96], own[160] = "";
    int64_t uid, pid, extra;
    int rc;

    wire_say(0, why, len, "%s", "");
    if (wire_peer_creds(peer_address, &uid, &pid) != 0)
        return wire_say(DASH_EPERM, why, len,
                   "refusing the daemon at %s: its messages carry no credentials to check "
                   "(Peer-Address \"%s\")",
                   endpoint, peer_address ? peer_address : "");
    if ((rc = wire_endpoint_owner(&extra, why, len)) != 0)
        return rc == -EINVAL ? DASH_EPERM : rc;
    if (is_trusted(uid, extra) || (owner >= 0 && uid == owner))
        return 0;
    if (owner >= 0 && !is_trusted(owner, extra))
        snprintf(own, sizeof own, ", nor as %s, who owns its socket",
                 user_text(owner, other, sizeof other));
    return wire_say(DASH_EPERM, why, len,
               "refusing the daemon at %s: it runs as %s (pid %lld), not as you (uid %u) or "
               "root%s; if you trust that user's daemon, set DASHD_ENDPOINT_OWNER=%lld",
               endpoint, user_text(uid, who, sizeof who), (long long)pid, (unsigned)geteuid(),
               own, (long long)uid);
}

void wire_format_uuid(const unsigned char bytes[16], char buf[WIRE_UUID_MAX])
{
    const unsigned char *b = bytes;
    snprintf(buf, WIRE_UUID_MAX,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}
