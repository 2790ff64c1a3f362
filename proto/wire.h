// SPDX-License-Identifier: BSD-3-Clause
/*
 * wire.h - what dashd and libdash share about the wire besides the schema: the protocol
 * version, size limits, the default endpoint and who may be behind it, and protobuf-c
 * decoding with a memory budget.
 *
 * One ZeroMQ message = one protobuf message: a client's DEALER sends a Dash__Request in a
 * single frame and gets a Dash__Reply in a single frame (the daemon's ROUTER adds and
 * strips the routing-id frame). docs/protocol.md is the full description.
 */
#ifndef DASH_WIRE_H
#define DASH_WIRE_H

#include "proto/dash.pb-c.h" /* generated into the build folder */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WIRE_PROTOCOL_VERSION 1u
/* Largest message either side accepts (ZMQ_MAXMSGSIZE): tensors travel by reference, so
 * real messages are a few hundred bytes; a larger one is an attack or a bug. */
#define WIRE_MAX_MESSAGE (64 * 1024)
/* protobuf-c may allocate at most this much while decoding one message. The schema is not
 * recursive, so a valid message needs a small multiple of its size. */
#define WIRE_DECODE_BUDGET (16 * WIRE_MAX_MESSAGE)

/* Write a reason into why (when there is room: why non-NULL, len > 0) and return code:
 * `return wire_say(DASH_EPERM, why, len, "...", ...)`. */
int wire_say(int code, char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Write the default endpoint into buf: $DASHD_ENDPOINT if set, else
 * ipc://$XDG_RUNTIME_DIR/dashd.sock, else ipc:///tmp/dashd-<uid>/dashd.sock (the private
 * directory below). Returns 0, or -ENAMETOOLONG (the path would not fit, or exceeds the
 * 107-byte limit of ipc socket paths). */
int wire_default_endpoint(char *buf, size_t len);

/* The endpoint a client connects to by default: $DASHD_ENDPOINT if set; else the per-user
 * endpoint above if its socket exists; else the system daemon's ipc:///run/dashd/dashd.sock
 * (systemd/dashd.service) if that socket exists; else the per-user endpoint. Same returns
 * as wire_default_endpoint(). */
#define WIRE_SYSTEM_ENDPOINT "ipc:///run/dashd/dashd.sock"
int wire_client_endpoint(char *buf, size_t len);

/* The endpoint for a client whose tensors are on GPU `gpu` (its index in PCI bus order, as
 * nvidia-smi and dashd@<gpu>.service number it; -1: none): as wire_client_endpoint(), but
 * after the per-user socket and before the system one, ipc:///run/dashd/gpu<gpu>.sock
 * (WIRE_GPU_ENDPOINT_FMT) if its socket exists. A socket the caller may not look at (its
 * directory is not searchable: not in the daemon's group) counts as existing, so that
 * connecting says "permission denied" on it rather than "not running" elsewhere. */
#define WIRE_GPU_ENDPOINT_FMT "ipc:///run/dashd/gpu%d.sock"
int wire_client_endpoint_gpu(int gpu, char *buf, size_t len);

/* The index of the GPU at PCI bus id busid ("0000:3b:00.0", any case) among the GPUs the
 * NVIDIA driver lists in dir (/proc/driver/nvidia/gpus: one entry per GPU named by its bus
 * id, whatever CUDA_VISIBLE_DEVICES hides), in bus id order. 0 and *ret_index; -ENOENT
 * when dir cannot be read or has no such entry. */
#define WIRE_NVIDIA_GPUS_DIR "/proc/driver/nvidia/gpus"
int wire_gpu_index(const char *busid, const char *dir, int *ret_index);

/* The text by which the wire names a GPU (RegisterBuffer.device_uuid, RegisterEvents, the
 * device in audit records): "GPU-" and the 16 bytes of its UUID as 8-4-4-4-12 hex digits, as
 * nvidia-smi -L prints it. buf holds WIRE_UUID_MAX bytes. */
#define WIRE_UUID_MAX 48
void wire_format_uuid(const unsigned char bytes[16], char buf[WIRE_UUID_MAX]);

/* For an ipc:// endpoint, the socket's file path (a pointer into endpoint); NULL for any
 * other transport. */
const char *wire_ipc_path(const char *endpoint);

/* ---- who may be behind an endpoint ------------------------------------------------------
 *
 * An ipc socket is a file anyone may create wherever they can write, and whoever binds the
 * path libdash connects to receives its Hello and registrations (pid, shm names) and can
 * answer anything. So libdash checks the socket's file before connecting
 * (wire_endpoint_check) and the daemon's credentials when it answers (wire_peer_check);
 * dashd keeps the private directory of its default endpoint private. Trusted users: the
 * caller (effective uid), root, and $DASHD_ENDPOINT_OWNER (a uid or user name) for who
 * deliberately uses another user's daemon. Every function writes a sentence saying why into
 * why (cut to len; "" on success; why may be NULL when len is 0). */

/* The directory of the per-user default endpoint when XDG_RUNTIME_DIR is unset:
 * /tmp/dashd-<uid> (getuid()). dashd creates it with mode 0700. Returns 0 or -ENAMETOOLONG. */
int wire_private_dir(char *buf, size_t len);

/* Whether dir may hold uid's endpoint: lstat() finds a real directory (not a symbolic
 * link) owned by uid, with no access at all for group or others. Returns 0; -ENOENT when
 * nothing is there; DASH_EPERM (-EPERM) when something is there and fails, saying what and
 * what to do; another -errno when lstat() fails otherwise. */
int wire_private_dir_check(const char *dir, uid_t uid, char *why, size_t len);

/* $DASHD_ENDPOINT_OWNER: 0 and *ret_uid (-1 when unset or empty), or -EINVAL when it is
 * neither a uid nor a user name. */
int wire_endpoint_owner(int64_t *ret_uid, char *why, size_t len);

/* The rule for an ipc:// endpoint, checked before connecting. The socket may be used when
 *  1. it belongs to a trusted user, in a directory of a trusted user that others cannot
 *     write (group and other write bits clear) or that is sticky (others may create files
 *     in /tmp but not remove or replace ours); or
 *  2. it belongs to the owner of its directory, which no one else can write, and the
 *     directory above that belongs to root or the caller and no one else can write it:
 *     only root (or the caller) can have made that directory for its owner, as systemd
 *     makes /run/dashd for a service's user.
 * A socket not there yet is judged by its directory alone (the daemon's credentials are
 * checked when it answers); a directory not there yet passes; a symbolic link in place of
 * the socket fails; the private directory of the default endpoint must pass
 * wire_private_dir_check() when it exists. Abstract sockets ("ipc://@name") and other
 * transports have no file and pass.
 * Returns 0 and *ret_owner: the socket's owner, whose daemon may answer (-1 when no file
 * vouches for anyone: nothing there yet, abstract, not ipc); DASH_EPERM with the reason;
 * -EINVAL (a bad $DASHD_ENDPOINT_OWNER or path) or -errno (looking at the path failed). */
int wire_endpoint_check(const char *endpoint, int64_t *ret_owner, char *why, size_t len);

/* The ids libzmq appends to the "Peer-Address" of a message from an ipc peer
 * (":<uid>:<gid>:<pid>", from SO_PEERCRED). 0 and *ret_uid, *ret_pid; -ENOENT when
 * peer_address is NULL or carries none. */
int wire_peer_creds(const char *peer_address, int64_t *ret_uid, int64_t *ret_pid);

/* The check after connecting: a message whose "Peer-Address" is peer_address may be
 * believed when the daemon runs as the caller, root, owner (from wire_endpoint_check, -1:
 * none) or $DASHD_ENDPOINT_OWNER. Returns 0, or DASH_EPERM with the reason (which names
 * endpoint) when it runs as someone else or sent no credentials. */
int wire_peer_check(const char *peer_address, const char *endpoint, int64_t owner, char *why,
                    size_t len);

/* Decode a request/reply with at most `budget` bytes of allocation; NULL if the bytes are
 * not a valid message or decoding needed more. Free with wire_free_request/reply. */
Dash__Request *wire_decode_request(const void *data, size_t len, size_t budget);
Dash__Reply *wire_decode_reply(const void *data, size_t len, size_t budget);
void wire_free_request(Dash__Request *m);
void wire_free_reply(Dash__Reply *m);

/* The request id of an undecodable message, if it starts with a well-formed field 1
 * (Request.id, a varint) as every encoder writes it; else 0. */
uint64_t wire_peek_id(const void *data, size_t len);

/* Encode any message into a malloc'd buffer. Returns 0 or -ENOMEM / -EMSGSIZE (encoded
 * size over WIRE_MAX_MESSAGE). */
int wire_encode(const ProtobufCMessage *m, void **ret_buf, size_t *ret_len);

#endif
