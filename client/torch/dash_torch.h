/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dash_torch.h - the native PyTorch op of the Python binding (libdash_torch_<torch
 * version>.so): attention on CUDA tensors as one C++ autograd node, so that an eager call
 * and its backward (which autograd runs on its own device thread) cross no Python and no
 * ctypes between PyTorch and libdash. It registers
 *
 *   torch.ops.dash_torch.attn(q, k, v, client, dtype, scale, causal, window_left,
 *                             window_right, softcap, schedule, audit_step, audit_label)
 *                             -> [out, lse]
 *
 * which dash_attn's eager path (client/python/dash_attn/_native.py) calls for dense
 * CUDA tensors once its own checks have passed; the backward is the node's. A packed
 * variable-length batch (flash_attn_varlen_func on CUDA tensors) likewise:
 *
 *   torch.ops.dash_torch.attn_varlen(q, k, v, offsets_q, offsets_k, max_seqlen_q,
 *                                    max_seqlen_k, batch_invariant, client, ...as attn...)
 *                                    -> [out, lse]
 *
 * q (total_q, heads_q, head_dim), k, v (total_k, heads_kv, head_dim), the offsets host
 * ints (batch + 1 each, cu_seqlens' values, which the binding has read and checked), sent
 * by value in the request as _varlen.py's CUDA path sends them; lse (heads_q, total_q). And
 *
 *   torch.ops.dash_torch.fwd(q, k, v, client, ...as attn...) -> [out, lse]
 *   torch.ops.dash_torch.bwd(dout, q, k, v, out, lse, client, ...as attn...) -> [dq, dk, dv]
 *
 * the node's forward and backward alone, no autograd: what the custom ops dash_attn::fwd
 * and dash_attn::bwd (client/python/dash_attn/_ops.py; torch.compile's graphs) run on CUDA
 * tensors. The ops
 * carry the same requests as the ctypes path (client/python/dash_attn/_client.py's
 * _forward_cuda and _backward_cuda, which _varlen.py's CUDA path calls too): the same
 * libdash calls, the same bits.
 *
 * A libdash client is not thread-safe (dash.h), and the node's backward runs on autograd's
 * thread while Python may use the same client: every use of a client, from C++ or from
 * Python, holds the client's lock here. Python's Client attaches its libdash client under
 * its id; the op names the client by that id. A failure throws a c10::Error whose message
 * starts "dash_attn[CODE]: " (CODE: the dash.h error, negative), which the binding turns
 * into its DashError.
 *
 * The functions below are for the binding's ctypes (C linkage):
 */
#ifndef DASH_TORCH_H
#define DASH_TORCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Make (or refresh) the entry of client id: c is its struct dash_client *. An entry lives
 * until dash_torch_forget (a closed client's entry names no client). Returns 0. */
int dash_torch_attach(int64_t id, void *c);

/* The caller holds id's lock (dash_torch_lock): the entry names no client from now on;
 * an op that names it then fails with DASH_EINVAL. The caller then closes the client. */
void dash_torch_detach(int64_t id);

/* Client id is gone for good (the binding's object collected): its entry leaves the map
 * (a thread inside one of its calls keeps it until it returns); an op naming id then fails
 * with DASH_EINVAL, "no such client". */
void dash_torch_forget(int64_t id);

/* The number of entries (live, closed and not yet forgotten): for the binding's tests. */
int64_t dash_torch_entries(void);

/* Take and give back id's lock (an entry made by dash_torch_attach); a blocking take. */
void dash_torch_lock(int64_t id);
void dash_torch_unlock(int64_t id);
/* Give id's lock back if the calling thread took it with dash_torch_lock, else nothing;
 * 1 if it did. For a binding whose take may be interrupted (Python's KeyboardInterrupt
 * raised right after dash_torch_lock returned) without knowing whether it holds the lock. */
int dash_torch_unlock_if_mine(int64_t id);

/* The PyTorch version this library was built against (its ABI is that version's). */
const char *dash_torch_built_for(void);

#ifdef __cplusplus
}
#endif

#endif
