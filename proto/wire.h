/*
 * wire.h - what dashd and libdash share about the wire besides the schema: the protocol
 * version, size limits, the default endpoint, and protobuf-c decoding with a memory budget.
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

#define WIRE_PROTOCOL_VERSION 1u
/* Largest message either side accepts (ZMQ_MAXMSGSIZE): tensors travel by reference, so
 * real messages are a few hundred bytes; a larger one is an attack or a bug. */
#define WIRE_MAX_MESSAGE (64 * 1024)
/* protobuf-c may allocate at most this much while decoding one message. The schema is not
 * recursive, so a valid message needs a small multiple of its size. */
#define WIRE_DECODE_BUDGET (16 * WIRE_MAX_MESSAGE)

/* Write the default endpoint into buf: $DASHD_ENDPOINT if set, else
 * ipc://$XDG_RUNTIME_DIR/dashd.sock, else ipc:///tmp/dashd-<uid>.sock.
 * Returns 0, or -ENAMETOOLONG (the path would not fit, or exceeds the 107-byte limit of
 * ipc socket paths). */
int wire_default_endpoint(char *buf, size_t len);

/* The endpoint a client connects to by default: $DASHD_ENDPOINT if set; else the per-user
 * endpoint above if its socket exists; else the system daemon's ipc:///run/dashd/dashd.sock
 * (systemd/dashd.service) if that socket exists; else the per-user endpoint. Same returns
 * as wire_default_endpoint(). */
#define WIRE_SYSTEM_ENDPOINT "ipc:///run/dashd/dashd.sock"
int wire_client_endpoint(char *buf, size_t len);

/* For an ipc:// endpoint, the socket's file path (a pointer into endpoint); NULL for any
 * other transport. */
const char *wire_ipc_path(const char *endpoint);

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
