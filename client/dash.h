// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash.h - libdash, the client library of dashd: attention forward and backward computed by
 * a daemon, on tensors that live in memory this process shares with it: POSIX shared
 * memory (the CPU backend) or CUDA device memory shared by IPC handle (the CUDA backend).
 *
 *   struct dash_client   one connection to dashd (a ZeroMQ DEALER socket and a session)
 *   struct dash_buffer   a shared-memory object, or a view of a cudaMalloc allocation,
 *                        registered with the daemon
 *   struct dash_tensor   a view into a buffer: byte offset, shape, strides in elements
 *
 * A typical use:
 *
 *   struct dash_client *c;
 *   struct dash_buffer *b;
 *   if (dash_connect(NULL, NULL, &c) < 0 || dash_shm_alloc(c, bytes, &b) < 0) ...
 *   fill dash_buffer_data(b) with q, k, v;
 *   struct dash_tensor q = dash_tensor_dense(b, 0, batch, seqlen, heads, head_dim), ...;
 *   struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
 *   int rc = dash_forward(c, &a, &q, &k, &v, &out, &lse, NULL);
 *
 * Every function returns 0 (or a count) on success and a negative DASH_E* code on failure
 * (system errors are -errno); the codes are the ones that travel on the wire
 * (docs/protocol.md). Output parameters are named ret_*, come last, and are left untouched
 * on failure. The library never logs, never exits and never raises signals on purpose.
 *
 * Daemon restarts and expired sessions are handled inside the library: it says Hello
 * again, registers every live buffer again (the daemon's buffer ids are internal) and
 * resends every request still in flight (forward and backward are pure functions of their
 * inputs). The caller only notices a delay.
 *
 * Threads: a struct dash_client is NOT thread-safe. Use one client per thread, or hold a
 * lock around every call that takes the client (its buffers included). Different clients
 * in one process are independent. Functions that take no client (the tensor helpers,
 * dash_strerror, dash_stats_free...) are thread-safe. A client must not be used in a
 * child after fork(); the child may only dash_close() it.
 *
 * docs/libdash.md says more: timeouts, what survives a daemon restart, and the choices
 * made where docs/protocol.md is silent.
 */
#ifndef DASH_H
#define DASH_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes ---------------------------------------------------------------------
 *
 * X(name, value, message): the one table of the project's error codes (the daemon's
 * proto/errors.h reads it from here through a copy the build generates). A translation
 * unit may include both headers, in either order (they share the include guard
 * DASH_ERRORS_H for the enum). Codes travel on the wire: append, never renumber. */
#define DASH_ERROR_TABLE(X)                                                      \
    X(EINVAL, -EINVAL, "invalid argument")                                       \
    X(ENOMEM, -ENOMEM, "out of memory")                                          \
    X(EOVERFLOW, -EOVERFLOW, "value too large for the index types")              \
    X(ENOTSUP, -ENOTSUP, "operation not supported")                              \
    X(EDEADLK, -EDEADLK, "schedule would deadlock")                              \
    X(ERANGE, -ERANGE, "result out of range")                                    \
    X(ENOENT, -ENOENT, "no such file or object")                                 \
    X(EIO, -EIO, "input/output error")                                           \
    X(EAGAIN, -EAGAIN, "resource temporarily unavailable")                       \
    X(ETIMEDOUT, -ETIMEDOUT, "timed out")                                        \
    X(EBUSY, -EBUSY, "resource busy")                                            \
    X(EPROTO, -EPROTO, "protocol error")                                         \
    X(ENOSPC, -ENOSPC, "no space left")                                          \
    X(ECANCELED, -ECANCELED, "operation canceled")                               \
    X(ECONNREFUSED, -ECONNREFUSED, "connection refused")                         \
    X(EBADDTYPE, -4001, "unsupported dtype")                                     \
    X(EHEADDIM, -4002, "unsupported head dimension")                             \
    X(ESHAPE, -4003, "tensor shapes do not agree")                               \
    X(ESCHED, -4004, "unknown or unusable schedule")                             \
    X(ENOGPU, -4005, "no usable GPU")                                            \
    X(ENOSESSION, -4006, "no session: send Hello first")                         \
    X(ENOBUF, -4007, "unknown buffer id")                                        \
    X(EBOUNDS, -4008, "tensor reaches outside its buffer")                       \
    X(EVERSION, -4009, "unsupported protocol version")                           \
    X(EMALFORMED, -4010, "malformed message")                                    \
    X(EBUFGONE, -4011, "buffer memory is gone (shrunk or unmapped)")             \
    X(ELIMIT, -4012, "over a per-client limit of this daemon")                   \
    X(EPERM, -EPERM, "not permitted (an endpoint or daemon that is not trusted)")            \
    X(EACCES, -EACCES, "permission denied (the daemon's socket or its directory)")

#ifndef DASH_ERRORS_H
#define DASH_ERRORS_H
#define DASH_ERRNO_MAP(X) DASH_ERROR_TABLE(X)

enum dash_err {
#define DASH_ERR_ENUM_(name, value, msg) DASH_##name = (value),
    DASH_ERROR_TABLE(DASH_ERR_ENUM_)
#undef DASH_ERR_ENUM_
};

/* A readable message for any return code of libdash or the daemon: "success" for codes
 * >= 0, strerror's text for other -errno values; never NULL. The string is static.
 * Thread-safe. */
const char *dash_strerror(int code);

/* The code's symbolic name ("DASH_EINVAL"), "DASH_OK" for codes >= 0, or "DASH_UNKNOWN".
 * The string is static. Thread-safe. */
const char *dash_errname(int code);
#endif /* DASH_ERRORS_H */

/* ---- connecting ---------------------------------------------------------------------- */

struct dash_client;

/* Connect without a session: dash_ping() and dash_stats() work, nothing else does (it
 * returns DASH_ENOSESSION). For monitoring tools, which should not show up as clients. */
#define DASH_CONNECT_NO_SESSION 1u
/* Order stream ops (dash_forward_stream...) with interprocess events and one round trip
 * per call, as daemons without semaphores need, even where semaphores could be used. */
#define DASH_CONNECT_STREAM_EVENTS 2u

/* Options of dash_connect(). Zero-initialise the struct: fields may be added at the end. */
struct dash_connect_opts {
    const char *client_name; /* shown by `dashctl stats`; NULL: the program's name */
    const char *run_tag;     /* free text naming the training run; NULL: none */
    int timeout_ms;          /* how long connecting, and each call, may wait for the daemon
                              * to show any sign of life; 0: 30000 */
    unsigned flags;          /* DASH_CONNECT_* */
    /* A process of a distributed run (torchrun, DDP): its rank among world_size processes,
     * sent in Hello and written by dashd into the audit record of every op of the session
     * (docs/audit.md), so two runs can be compared rank by rank. world_size 0: none given
     * (rank must be 0 then); otherwise rank < world_size. libdash reads no environment
     * variable for these: the caller (the Python binding reads RANK and WORLD_SIZE) says. */
    unsigned world_size;
    unsigned rank;
};

/* Write the endpoint dash_connect(NULL, ...) uses into buf: $DASHD_ENDPOINT, else the
 * per-user endpoint (ipc://$XDG_RUNTIME_DIR/dashd.sock, else
 * ipc:///tmp/dashd-<uid>/dashd.sock, in a directory dashd makes with mode 0700) if a
 * daemon's socket is there, else the system daemon's ipc:///run/dashd/dashd.sock if its
 * socket exists, else the per-user endpoint.
 * A system socket the caller may not look at (its directory is only for group dash) counts
 * as there, so that connecting says "permission denied" on it.
 * Returns 0, DASH_EINVAL (buf NULL) or -ENAMETOOLONG. Thread-safe (reads the environment). */
int dash_default_endpoint(char *buf, size_t len);

/* The endpoint for tensors on CUDA device cuda_device of this process (an ordinal as
 * cudaSetDevice takes it, under this process's CUDA_VISIBLE_DEVICES): $DASHD_ENDPOINT,
 * else the per-user endpoint if a daemon's socket is there, else the daemon of that GPU,
 * ipc:///run/dashd/gpuN.sock (dashd@N.service; N is the GPU's index in PCI bus order, as
 * nvidia-smi numbers it), if its socket exists, else as dash_default_endpoint().
 * Returns 0, DASH_EINVAL (buf NULL, cuda_device < 0), -ENAMETOOLONG, or DASH_ENOGPU (no
 * such device, or libdash built without CUDA). Thread-safe. */
int dash_default_endpoint_cuda(int cuda_device, char *buf, size_t len);

/* Connect to the daemon at endpoint (a ZeroMQ endpoint, "ipc://..."; NULL: the default
 * endpoint above) and open a session (Hello with protocol version 1, the client name, this
 * process's pid and the run tag). opts may be NULL (all defaults); its strings are copied.
 *
 * An ipc:// endpoint must be trusted (docs/libdash.md, "Whose daemon"): before connecting,
 * its socket file must belong to the caller or root in a directory others cannot tamper
 * with, or to a service in a directory root made for it; and the daemon that answers
 * must run as the caller, root, that owner, or $DASHD_ENDPOINT_OWNER (a uid or user name
 * the caller chooses to trust). The same check applies to every later reply, so a daemon
 * that replaces ours (a restart on an abstract name or in /tmp) is refused before anything
 * needing the session is sent to it.
 *
 * An ipc:// socket file that is missing, that nothing listens on, or that the caller may
 * not open fails at once; only a socket where something accepts connections is waited on.
 *
 * Returns 0 and *ret_client, to be freed with dash_close(); or DASH_EINVAL (bad argument or
 * endpoint, a name or run tag over 255 bytes, unknown flags, rank >= world_size (or a rank
 * without a world size), a DASHD_ENDPOINT_OWNER that names nobody), DASH_ENOENT (no socket
 * file at the endpoint: no daemon), DASH_ECONNREFUSED (a socket file nothing listens on: a
 * daemon that died), DASH_EACCES (the caller may not open the socket: not in the daemon's
 * group), DASH_EPERM (the endpoint or the daemon is not
 * trusted: nothing but a Hello was sent; dash_endpoint_check() says why), DASH_ETIMEDOUT
 * (something accepts connections there but no daemon answered within the timeout),
 * DASH_EVERSION (the daemon does not speak our protocol version), DASH_ENOMEM, -errno (the
 * socket's path cannot be looked at), or another code the daemon replied. The new client
 * belongs to the calling thread (see the top of this file). dash_connect_explain() says
 * which in words. */
int dash_connect(const char *endpoint, const struct dash_connect_opts *opts,
                 struct dash_client **ret_client);

/* dash_connect(), and on failure a sentence for people into why (at most len bytes,
 * NUL-terminated; "" on success) that names the endpoint and says what is wrong there:
 * "no dashd at ipc:///run/dashd/gpu0.sock: /run/dashd/gpu0.sock does not exist (...)",
 * "... nothing listens on ...", "permission denied connecting to dashd at ... (you are uid
 * 1000; <the socket's and its directory's owner, group and mode>) ...", "no answer from
 * dashd at ... within 30000 ms ...", or the reason a daemon is not trusted. Same returns
 * as dash_connect(), and DASH_EINVAL for why NULL with len > 0. */
int dash_connect_explain(const char *endpoint, const struct dash_connect_opts *opts,
                         struct dash_client **ret_client, char *why, size_t len);

/* The decision dash_connect(endpoint, ...) makes about whom it may talk to, and why
 * (endpoint NULL: the default endpoint). First the socket file's owner and directories
 * (nothing is sent when they fail); then, if they pass, whoever answers at the endpoint is
 * asked for a Ping without a session, waiting at most 2 s, and must run as a trusted user.
 *
 * Writes a sentence into why (at most len bytes, NUL-terminated; "" when nothing is
 * refused) that names the socket or daemon, its owner's uid and what to do. Returns 0
 * (nothing refuses it: a trusted file and daemon, or no daemon answering), DASH_EPERM (not
 * trusted), DASH_EINVAL (why NULL with len > 0, an empty endpoint or one with no
 * transport such as "gpu0.sock", a bad $DASHD_ENDPOINT_OWNER) or -errno (the path cannot be
 * looked at). Thread-safe. */
int dash_endpoint_check(const char *endpoint, char *why, size_t len);

/* Close the connection and free the client with every buffer it still owns: the buffers
 * are unregistered when the daemon is reachable (waiting at most 1 s); shared-memory ones
 * are unmapped and unlinked (CUDA memory stays the caller's). Tickets not yet waited are dropped; the daemon may still finish their work.
 * c may be NULL. After fork(), a child may call it: it then only frees memory. */
void dash_close(struct dash_client *c);

/* ---- shared-memory buffers ------------------------------------------------------------ */

struct dash_buffer;

/* Create a POSIX shared-memory object of size bytes (mode 0600, a unique name
 * "/dash-<pid>-<n>-<hex>"), map it, reserve its memory (so a full /dev/shm is an error
 * here, not a SIGBUS later) and register it with the daemon. The memory starts zeroed.
 *
 * Returns 0 and *ret_buf, owned by c until dash_shm_free() or dash_close(); or DASH_EINVAL
 * (c or ret_buf NULL, size 0), DASH_ENOSESSION (a DASH_CONNECT_NO_SESSION client), -errno
 * from shm_open/ftruncate/mmap (-ENOSPC, -EMFILE...), DASH_ETIMEDOUT, or the daemon's reply
 * (DASH_EBOUNDS, DASH_ENOTSUP...). Nothing is left behind on failure. */
int dash_shm_alloc(struct dash_client *c, size_t size, struct dash_buffer **ret_buf);

/* Unregister a buffer of c, of either kind, and free its handle; a shared-memory buffer is
 * also unmapped and unlinked (CUDA memory stays the caller's, who may cudaFree it once this
 * returned: the daemon closes its mapping after the requests in flight that use it). Does
 * not wait for the daemon's answer (an unreachable daemon releases it when the session
 * ends). Returns 0 (the handle is then gone), DASH_EINVAL (c or b NULL, or b belongs to
 * another client) or DASH_EBUSY (a request submitted with a tensor in b has not completed:
 * dash_wait() for it first); the handle stays valid on failure. */
int dash_buffer_free(struct dash_client *c, struct dash_buffer *b);

/* dash_buffer_free() under its first name. */
int dash_shm_free(struct dash_client *c, struct dash_buffer *b);

/* The buffer's memory, valid until it is freed; NULL if b is NULL. Shared memory: our
 * mapping (page-aligned, dash_buffer_size() bytes). CUDA: the dev_ptr given to
 * dash_cuda_register() - device memory, not to be dereferenced on the host. */
void *dash_buffer_data(const struct dash_buffer *b);

/* The size given to dash_shm_alloc() or dash_cuda_register(); 0 if b is NULL. */
size_t dash_buffer_size(const struct dash_buffer *b);

/* ---- CUDA buffers ---------------------------------------------------------------------- */

/* Register `size` bytes of device memory at dev_ptr with a daemon running the CUDA backend
 * on the same GPU. dev_ptr may point anywhere inside a cudaMalloc allocation (PyTorch's
 * caching allocator hands out pieces of larger blocks): the library finds the allocation's
 * base and size (cuMemGetAddressRange), exports the base (cudaIpcGetMemHandle) and sends
 * the handle, the GPU's UUID, dev_ptr's offset in the allocation and size. Tensors of the
 * buffer are then byte offsets from dev_ptr, as for shared memory; the daemon reads and
 * writes them in place on the GPU, and replies once the op has completed on the device
 * (dash_forward_stream() orders it on a stream instead).
 *
 * The memory stays the caller's: keep the allocation alive (no cudaFree) until the buffer
 * is freed (dash_buffer_free() or dash_close()). The handle is kept, so the buffer is
 * registered again by itself after a daemon restart. Registering the same allocation more
 * than once (several views) is fine: the daemon opens it once. CUDA calls are made on the
 * pointer's device, and the calling thread's current device is restored afterwards. The
 * process must not be the daemon, and the memory must be shareable by legacy CUDA IPC
 * (cudaMalloc memory; not cudaMallocManaged, not cuMemCreate/VMM memory such as PyTorch's
 * expandable segments).
 *
 * Returns 0 and *ret_buf, owned by c until dash_buffer_free() or dash_close(); or
 * DASH_EINVAL (c, dev_ptr or ret_buf NULL, size 0, dev_ptr not device memory),
 * DASH_ENOGPU (libdash was built without CUDA, or no CUDA device or driver is usable),
 * DASH_EBOUNDS ([dev_ptr, dev_ptr + size) runs past the allocation's end), DASH_ENOTSUP
 * (memory legacy IPC cannot share; or the daemon's answer: a CPU daemon, another GPU),
 * DASH_ENOSESSION (a DASH_CONNECT_NO_SESSION client), DASH_ETIMEDOUT, or the daemon's
 * reply (DASH_EBOUNDS, DASH_EINVAL when it cannot open the handle...). */
int dash_cuda_register(struct dash_client *c, void *dev_ptr, size_t size,
                       struct dash_buffer **ret_buf);

/* The registered buffer that covers the whole cudaMalloc allocation holding
 * [ptr, ptr + bytes), and ptr's byte offset in it - for frameworks whose allocators hand
 * out pieces of larger blocks (PyTorch's caching allocator): one registration then serves
 * every tensor of a block, and a tensor is (buffer, offset). Registrations are kept per
 * client (up to 64, least recently used unregistered first) and looked up by the
 * allocation's IPC handle, so memory freed and allocated again at the same address is
 * registered anew, never mistaken for the old. The buffer belongs to the library: do not
 * free it (dash_close() does). Each call costs a few driver queries and, for a new
 * allocation, one round trip to the daemon. The allocation stays mapped by the daemon
 * while registered: call dash_close(), or let the cache evict it, before relying on its
 * memory being released. Returns 0, *ret_buf and *ret_offset; or the errors of
 * dash_cuda_register(), and DASH_EBUSY (64 registrations all used by ops in flight). */
int dash_cuda_view(struct dash_client *c, const void *ptr, size_t bytes,
                   struct dash_buffer **ret_buf, uint64_t *ret_offset);

/* ---- tensors -------------------------------------------------------------------------- */

/* A view into a buffer. q, k, v, out and their gradients have ndim 4, shape
 * (batch, seqlen, heads, head_dim) as flash-attn uses; lse has ndim 3, shape
 * (batch, heads_q, seqlen_q), float32 and dense. In a packed batch (dash_attn's
 * cu_seqlens) the batch dim is gone: (total, heads, head_dim) and (heads_q, total_q). strides are in elements, one per
 * dimension (entries past ndim ignored); all zero means dense. The element type is the
 * op's dash_attn.dtype (lse: always float32). */
struct dash_tensor {
    struct dash_buffer *buf;
    uint64_t offset; /* bytes from the start of the buffer */
    int32_t ndim;    /* 4, or 3 for lse */
    int64_t shape[4];
    int64_t strides[4]; /* elements; all 0: dense */
};

/* A dense (batch, seqlen, heads, head_dim) view at byte offset of b, strides filled in
 * (row-major: heads*head_dim*seqlen, heads*head_dim, head_dim, 1). Pure; no checks: the
 * op that uses it checks it. */
/* A strided view of device memory as a framework holds it: the address of its element 0,
 * ndim (1..4), shape, strides in elements (non-negative) and the element's size in bytes. */
struct dash_cuda_ref {
    const void *ptr;
    int32_t ndim;
    int32_t elem_size;
    int64_t shape[4];
    int64_t strides[4];
};

/* The n dash_tensors of n views of device memory, in one call: for each, dash_cuda_view()
 * of the bytes it spans, then shape and strides copied. What a binding calls per op so that
 * its tensors cost one crossing into C, not one per tensor. ret[i] is valid when 0 is
 * returned; the first failure's code otherwise (DASH_EINVAL also for an empty view or a
 * negative stride), as dash_cuda_view() gives it. */
int dash_cuda_tensors(struct dash_client *c, int32_t n, const struct dash_cuda_ref *refs,
                      struct dash_tensor *ret);

struct dash_tensor dash_tensor_dense(struct dash_buffer *b, uint64_t offset, int64_t batch,
                                     int64_t seqlen, int64_t heads, int64_t head_dim);

/* The dense (batch, heads_q, seqlen_q) float32 lse view at byte offset of b, strides
 * filled in (heads_q*seqlen_q, seqlen_q, 1). Pure. */
struct dash_tensor dash_tensor_lse(struct dash_buffer *b, uint64_t offset, int64_t batch,
                                   int64_t heads_q, int64_t seqlen_q);

/* ---- attention ------------------------------------------------------------------------ */

/* The same numbering as the wire schema's enums. */
/* DASH_F64 is served by the CPU engine only (computed in double: for checking gradients);
 * dashd on a GPU refuses it with DASH_EBADDTYPE. */
enum dash_dtype { DASH_F32 = 0, DASH_F16 = 1, DASH_BF16 = 2, DASH_F64 = 3 };
enum dash_mask { DASH_MASK_FULL = 0, DASH_MASK_CAUSAL = 1 /* bottom-right aligned */ };
enum dash_schedule {
    DASH_SCHED_AUTO = 0, /* the fastest deterministic schedule for the shape */
    DASH_SCHED_ATOMIC = 1, /* fast, not reproducible */
    DASH_SCHED_ASCENDING = 2,
    DASH_SCHED_DESCENDING = 3,
    DASH_SCHED_SPT = 4,
    DASH_SCHED_SHIFT = 5,
};

/* Bytes per element of t: 8, 4 or 2; 0 for a value outside the enum. */
size_t dash_dtype_size(enum dash_dtype t);

/* The parameters of one op. Zero-initialise, then set what you need: zero means the
 * default everywhere. */
struct dash_attn {
    enum dash_dtype dtype;
    enum dash_mask mask;
    float scale; /* 0: 1/sqrt(head_dim); else finite and > 0 */
    enum dash_schedule schedule;
    int32_t wave;             /* virtual wave size W; 0: the default (64) */
    int32_t block_m, block_n; /* tile sizes; 0: the backends' defaults */
    /* A sliding window, flash-attn's window_size: with `window` set, query i of a sequence
     * sees key j only if i + off - window_left <= j <= i + off + window_right, where
     * off = seqlen_k - seqlen_q of the sequence, -1 meaning unbounded on that side. The
     * causal mask forces window_right to 0 (flash-attn's causal with a window). */
    int32_t window;                    /* 0: no window; 1: window_left/right apply */
    int32_t window_left, window_right; /* >= -1 */
    float softcap;                     /* 0: off; else scores become softcap tanh(s/softcap) */
    /* A packed variable-length batch (flash-attn's varlen), when cu_seqlens_q.buf is set:
     * cu_seqlens_q and cu_seqlens_k are int32 tensors of ndim 1, shape (batch + 1), dense,
     * in shared-memory buffers of the client - offsets from 0 to the token count that
     * never decrease; q, k, v, out and the gradients have ndim 3, (total, heads, head_dim),
     * and lse ndim 2, (heads_q, total_q). No sequence may be longer than max_seqlen_q /
     * max_seqlen_k (>= 1). */
    struct dash_tensor cu_seqlens_q, cu_seqlens_k;
    int32_t max_seqlen_q, max_seqlen_k;
    /* A packed batch's `auto` schedule then ignores the other sequences: a sequence's bits
     * never depend on what it is packed with (every explicit schedule already gives that;
     * docs/schedules.md). */
    int32_t batch_invariant;
    /* Or the offsets by value, for callers whose offsets are not in a buffer (a
     * stream-ordered call on CUDA tensors returns before the daemon reads anything, so a
     * buffer it reuses could change under it): with cu_seqlens_q.buf NULL and n_offsets >=
     * 2, offsets_q and offsets_k each point to n_offsets int32 (batch + 1) in the caller's
     * memory, which the call copies into the request; the rest as above. */
    const int32_t *offsets_q, *offsets_k;
    int32_t n_offsets;
};

/* What an op ran with: everything its output bits depend on besides the inputs. */
struct dash_result {
    enum dash_schedule schedule; /* never AUTO: the one auto chose */
    int32_t wave, block_m, block_n;
    uint64_t queue_us; /* waiting in the daemon's queue */
    uint64_t run_us;   /* computing */
    char backend[16];  /* "cpu" or "cuda"; NUL-terminated */
};

/* Forward: out = softmax(scale * q k^T, mask) v and lse, the log of the softmax's
 * denominator, written into out's and lse's buffers. On CUDA buffers the daemon reads them
 * when it runs the op, from its own process: the caller's writes must have finished (a
 * pageable cudaMemcpy returns before its bytes land: cudaDeviceSynchronize first), or use
 * dash_forward_stream(), which orders against a stream. Blocks until the daemon is done,
 * however long that takes while the daemon stays responsive (it is probed after 1 s of
 * silence); gives up with DASH_ETIMEDOUT after the client's timeout without any sign of
 * life. Resent transparently when the daemon restarts.
 *
 * Returns 0 and, if ret_result is not NULL, *ret_result; or DASH_EINVAL (an argument NULL, a
 * tensor with the wrong ndim or a buffer of another client, an enum out of range, a
 * negative or non-finite scale, negative wave or block sizes; nothing is sent), the
 * daemon's verdict (DASH_ESHAPE, DASH_EBOUNDS, DASH_EHEADDIM, DASH_EBADDTYPE, DASH_ESCHED,
 * DASH_EBUSY...), DASH_ETIMEDOUT or -errno. After DASH_ETIMEDOUT the daemon may still
 * run the op if it wakes up, and write its outputs then: give the next op other bytes than
 * this one's outputs (the Python binding frees its buffer and takes a new one). */
int dash_forward(struct dash_client *c, const struct dash_attn *a, const struct dash_tensor *q,
                 const struct dash_tensor *k, const struct dash_tensor *v,
                 const struct dash_tensor *out, const struct dash_tensor *lse,
                 struct dash_result *ret_result);

/* Backward: dq, dk, dv from q, k, v, out, lse (as the forward wrote them) and dout. Same
 * contract as dash_forward(). */
int dash_backward(struct dash_client *c, const struct dash_attn *a, const struct dash_tensor *q,
                  const struct dash_tensor *k, const struct dash_tensor *v,
                  const struct dash_tensor *out, const struct dash_tensor *lse,
                  const struct dash_tensor *dout, const struct dash_tensor *dq,
                  const struct dash_tensor *dk, const struct dash_tensor *dv,
                  struct dash_result *ret_result);

/* A full daemon queue (DASH_EBUSY) is waited out: the op is sent again, backing off up to
 * 50 ms, until the client's timeout since it was submitted; only then does it fail with
 * DASH_EBUSY. DASH_ELIMIT: this process is over one of the daemon's per-client caps
 * (sessions, buffers, registered bytes, ops in flight, tensor bytes per op), named by
 * dash_last_error(). */

/* Asynchronous forms: send the request and return at once with a ticket for dash_wait()
 * or dash_poll(). Any number may be in flight. The tensors are copied; their buffers must
 * not be freed (dash_shm_free() says DASH_EBUSY) until the ticket completes, and their
 * output memory must not be read before then.
 *
 * Returns 0 and *ret_ticket (never 0); or the argument errors of dash_forward() (nothing
 * sent), DASH_ENOSESSION (a DASH_CONNECT_NO_SESSION client), DASH_ENOMEM, DASH_ETIMEDOUT
 * (the request could not even be queued). The daemon's verdict comes from dash_wait(). */
int dash_forward_submit(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, uint64_t *ret_ticket);

int dash_backward_submit(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, uint64_t *ret_ticket);

/* Wait until every stream-ordered op of c (dash_forward_stream, dash_backward_stream)
 * has been answered by the daemon - not until the GPU has run it: synchronise the stream
 * for that. Such ops return as soon as they are sent, so a failure the daemon finds
 * reaches the caller later: here, or as the return value of the next stream-ordered call.
 * Returns 0, or the first failure not yet returned (dash_last_error() says which op and
 * why), or DASH_ETIMEDOUT when the daemon stopped answering (the ops still in flight are
 * then failed, and their streams released). */
int dash_sync(struct dash_client *c);

/* Wait for a ticket of c. timeout_ms: how long to wait at most; -1: as long as the daemon
 * stays responsive, giving up after the client's timeout without any sign of life. Replies
 * for other tickets that arrive meanwhile are kept for their own dash_wait()/dash_poll().
 *
 * Returns the op's status (0 or the daemon's code, as dash_forward() describes) and then
 * forgets the ticket; *ret_result (if not NULL) is filled when the status is 0. Returns
 * DASH_ETIMEDOUT when the op has not completed in time, or -errno on a local failure: the
 * ticket is then kept, to wait for again. An unknown (or already waited) ticket, or
 * timeout_ms < -1, is DASH_EINVAL. */
int dash_wait(struct dash_client *c, uint64_t ticket, int timeout_ms,
              struct dash_result *ret_result);

/* dash_wait() without blocking: reads what has arrived, then returns the op's status as
 * dash_wait() does, or DASH_EAGAIN if it is not done yet (the ticket is kept), or
 * DASH_ETIMEDOUT if the daemon has shown no sign of life for the client's timeout since
 * the request was sent (the ticket is kept). */
int dash_poll(struct dash_client *c, uint64_t ticket, struct dash_result *ret_result);

/* Why the last call on c that failed did (dash_forward, dash_backward, their stream
 * forms, dash_wait, dash_poll, dash_ping, dash_stats): the daemon's explanation (e.g. "k
 * has seqlen 100 but v has 99"), else the library's own sentence, naming the endpoint where
 * the daemon is concerned ("no sign of life from dashd at ipc://... for 30000 ms"); never
 * "" after a failure of those calls; "" before any failure. Valid until the next call on
 * c. */
const char *dash_last_error(const struct dash_client *c);

/* ---- audit ---------------------------------------------------------------------------- */

/* What the ops c submits from now on tell the daemon's audit log (docs/audit.md) besides
 * the client name and run tag given at connect: the training step (step < 0: none) and a
 * label naming the call site, e.g. "layer3.attn" (NULL or "": none; at most 127 bytes).
 * `dashctl audit diff` aligns two runs by run tag, step and label. Costs nothing when the
 * daemon does not audit. Returns 0 or DASH_EINVAL (c NULL, label too long). */
int dash_set_audit(struct dash_client *c, int64_t step, const char *label);

/* ---- stream-ordered ops (CUDA) ------------------------------------------------------- */

/* Forward on CUDA buffers, ordered on the GPU against the caller's CUDA stream instead of
 * on the host: the daemon's kernels start only after everything queued on `stream` before
 * the call, and whatever the caller queues on `stream` after the call starts only after
 * the daemon's kernels have written the outputs - as an in-process kernel launch would be.
 *
 * How, when the daemon offers semaphores (HelloReply.signals: the CUDA backend on a GPU
 * with 64-bit stream memory operations, such as Hopper) and this process can use them:
 * the call writes a sequence number into a ready word behind the caller's work on
 * `stream`, sends the op and makes `stream` wait (on the GPU) for the daemon to write it
 * into a done word behind its kernels; it returns once the request is sent, without
 * waiting for the daemon. The words live in 6 KiB of device memory the library allocates
 * and registers on the first such call (256 slots; the 257th op in flight waits for the
 * first's answer). The daemon answers each op when it has run: a failure it finds (a shape
 * it refuses, a limit, a full session, a launch that fails) never leaves `stream` waiting
 * - the op is released without its outputs computed - and reaches the caller as the
 * return value of the next stream-ordered call or of dash_sync(), with dash_last_error()
 * naming the op. If the daemon's process goes away with ops in flight, a watchdog thread
 * of the library releases them, so a caller blocked in a CUDA synchronise is released, and
 * the next call or dash_sync() fails with DASH_EIO. Otherwise (or with
 * DASH_CONNECT_STREAM_EVENTS), interprocess events: the call records one on `stream`,
 * sends the op naming a second one for the daemon to record, and returns after the
 * daemon's answer that the op is queued (one round trip); a failure the daemon finds is
 * this call's return value.
 *
 * Failed ops are poisoned, never silently wrong: whenever a stream-ordered op fails after
 * its outputs were checked (below) - refused or failed in the daemon, the daemon gone,
 * not sent, or an earlier op's failure returned by this call - every byte of its outputs
 * (out and lse; dq, dk and dv for the backward) is set to 0xFF, which is NaN in f16,
 * bf16, f32 and f64, before `stream` goes on: work the caller queued on `stream` after the
 * call sees the poison, never the bytes the memory held before, and the poison lands after
 * whatever the caller queued on `stream` before the call (so a producer still writing the
 * outputs cannot overwrite it). With semaphores the library writes it on a stream of its
 * own behind the op's ready word, then the done word (once, whichever of the watchdog -
 * within about 100 ms - or the call that reads the reply gets there first); with events,
 * on `stream` before the call returns the error. Only the outputs' elements are written:
 * the bytes between the elements of a strided output are not. The error itself is still
 * returned as above: check dash_sync() (or the next call) before trusting any output.
 * Known limit: when the library gives up on a daemon that is alive but has stopped
 * answering (ten timeouts without progress, or dash_sync()'s DASH_ETIMEDOUT), a daemon
 * that later wakes up may still write the outputs after the poison.
 *
 * A restart with semaphore-ordered ops in flight: whichever call of c first hears of it
 * (any call that reads the daemon's answers: dash_ping(), dash_poll(), dash_wait(), a
 * submit, ...) sends those ops to the new daemon before it returns, as the caller may
 * block in CUDA on them next. So while a session is being restored, a call that otherwise
 * returns at once or within its timeout_ms may first wait for the restore: a few round
 * trips, at most the client's timeout; ops it cannot send are failed and poisoned as
 * above. An op the watchdog has released (the old daemon's process gone) is never sent
 * again: its outputs are poisoned, and the caller may have reused them since.
 *
 * The outputs are checked before anything is queued: each must lie inside its buffer
 * with strides >= 0 (DASH_EBOUNDS / DASH_EINVAL, nothing queued or poisoned).
 *
 * stream is a cudaStream_t of the buffers' device (NULL: the legacy default stream), not
 * one that is capturing a CUDA graph (DASH_EINVAL, nothing queued or poisoned: a graph
 * cannot record work done in dashd's process). A client uses one device for its
 * stream-ordered ops. Do not read the outputs on the host,
 * or from another stream, without first synchronising with `stream`. dash_close() waits
 * for the ops still in flight (or releases them).
 *
 * Returns 0 and *ret_result (may be NULL; run_us is 0: the op has not run yet; with
 * semaphores, the schedule is the one asked for, queue_us 0); a failure of an earlier
 * stream-ordered op not yet reported (this op is then not sent, and its outputs are
 * poisoned); the errors of dash_forward() (with semaphores: those found before sending);
 * DASH_EBOUNDS for an output reaching past its buffer; DASH_EINVAL also for a
 * tensor that is not in a CUDA buffer of c, tensors on different devices, or a stream that
 * cannot be waited on; DASH_ENOGPU (libdash built without CUDA, no usable device);
 * DASH_ENOTSUP (a daemon without interprocess events: the CPU backend). */
int dash_forward_stream(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, void *stream,
                        struct dash_result *ret_result);

/* Backward, stream-ordered: as dash_forward_stream() for dash_backward(). */
int dash_backward_stream(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, void *stream,
                         struct dash_result *ret_result);

/* ---- monitoring ----------------------------------------------------------------------- */

/* One round trip to the daemon. timeout_ms: at most this long; -1: the client's timeout.
 * Works with or without a session. Returns 0 and *ret_rtt_us (may be NULL), the round
 * trip in microseconds; or DASH_ETIMEDOUT, DASH_EPROTO (the payload came back different),
 * DASH_EINVAL. */
int dash_ping(struct dash_client *c, int timeout_ms, uint64_t *ret_rtt_us);

/* One session as the daemon sees it. Strings are NUL-terminated, never NULL ("" when the
 * daemon did not say), and owned by the struct dash_stats. */
struct dash_client_stats {
    uint64_t session_id;
    const char *client_name;
    uint32_t pid;
    const char *run_tag;
    uint64_t requests, errors;
    uint64_t forwards, backwards;
    uint64_t bytes_registered;
    uint32_t buffers;
    uint64_t latency_p50_us, latency_p99_us;
    uint32_t in_flight;
    uint32_t rank, world_size; /* as its Hello said; world_size 0: not given */
};

/* The daemon's counters (StatsReply in the wire schema); 0 or "" for what it did not say. */
struct dash_stats {
    const char *server_version;
    const char *backend;
    uint64_t uptime_ms;
    uint32_t queue_depth, queue_capacity;
    uint64_t requests, errors;
    uint32_t threads;
    uint64_t own_session_id; /* this client's session (0: none), to find it in clients */
    uint32_t sessions;       /* all sessions; n_clients may be fewer (one reply's worth) */
    size_t n_clients;
    struct dash_client_stats *clients; /* n_clients entries, one per listed session */
    /* The audit log: path "" when the daemon keeps none. */
    const char *audit_path, *audit_level;
    uint64_t audit_written, audit_dropped, audit_write_errors;
    /* GPU backend: "mps" (dashd runs under NVIDIA MPS) or "contexts" (it does not: each
     * stream-ordered op costs GPU context switches, docs/mps.md); "" on the CPU. */
    const char *gpu_sharing;
};

/* Ask the daemon for its counters. Works with or without a session. Returns 0 and
 * *ret_stats, to be freed with dash_stats_free(); or DASH_EINVAL, DASH_ETIMEDOUT,
 * DASH_ENOMEM, DASH_EPROTO. */
int dash_stats(struct dash_client *c, struct dash_stats **ret_stats);

/* Free what dash_stats() returned; NULL is fine. */
void dash_stats_free(struct dash_stats *s);

#ifdef __cplusplus
}
#endif

#endif
