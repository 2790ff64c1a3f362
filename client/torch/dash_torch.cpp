// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_torch.cpp - the native PyTorch op (dash_torch.h says what and why): the clients'
 * entries and locks, the op's forward and backward as a torch::autograd::Function, and
 * its registration. The requests are those of _client.py's _forward_cuda and
 * _backward_cuda: q, k, v (and out, dout) with their last stride 1 (a copy otherwise),
 * fresh contiguous out / lse / dq / dk / dv, the refs of dash_cuda_tensors, the
 * stream-ordered call on the tensors' device's current stream, the audit tag set first.
 * A packed batch's (attn_varlen) adds what _varlen.py's CUDA path adds: 3-D tensors, lse
 * (heads_q, total_q), and the offsets by value in the request (dash_attn.offsets_q/k).
 */
#include "client/torch/dash_torch.h"

#include "client/dash.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <pthread.h>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using at::Tensor;

/* ---- clients: an entry and a lock per Python Client's id ------------------------------ */

struct client_entry {
    std::mutex mu;
    std::atomic<struct dash_client *> c{nullptr}; /* nullptr: closed (dash_torch_detach) */
    std::atomic<std::thread::id> owner{};          /* who took mu through dash_torch_lock */
};

std::mutex entries_mu;
std::unordered_map<int64_t, std::shared_ptr<client_entry>> entries;

/* A fork while another thread held entries_mu would leave it held in the child for ever:
 * the child starts with it free (its entries name the parent's clients, which a child must
 * not use: dash.h; the binding makes new ones there). */
void entries_after_fork()
{
    new (&entries_mu) std::mutex();
}
const int entries_fork_handler = pthread_atfork(nullptr, nullptr, entries_after_fork);

std::shared_ptr<client_entry> entry_of(int64_t id)
{
    std::lock_guard<std::mutex> g(entries_mu);
    auto it = entries.find(id);
    return it == entries.end() ? nullptr : it->second;
}

[[noreturn]] void fail(int rc, const std::string &what)
{
    TORCH_CHECK(false, "dash_attn[", rc, "]: ", what);
}

/* ---- one request ---------------------------------------------------------------------- */

/* What the forward's arguments say about the op, kept for the backward. A packed batch
 * (ndim 3) has its offsets here: a.offsets_q/k stay NULL until run_op points them at these
 * (the struct is copied and saved as bytes, the vectors' storage moves with them). */
struct attn_args {
    int64_t client;
    struct dash_attn a;
    int64_t audit_step;
    std::optional<std::string> audit_label;
    int ndim = 4;                              /* q's: 4 dense, 3 a packed batch */
    std::vector<int32_t> offsets_q, offsets_k; /* a packed batch's: batch + 1 each */
};

struct dash_cuda_ref ref_of(const Tensor &t)
{
    struct dash_cuda_ref r = {};
    r.ptr = t.data_ptr();
    r.ndim = (int32_t)t.dim();
    r.elem_size = (int32_t)t.element_size();
    for (int64_t i = 0; i < t.dim() && i < 4; i++) {
        r.shape[i] = t.size(i);
        r.strides[i] = t.stride(i);
    }
    return r;
}

Tensor last_dim_contiguous(const Tensor &t)
{
    return t.stride(-1) == 1 ? t : t.contiguous();
}

/* Client id's entry, or a failure naming what is wrong with it (checked again under its
 * lock when the op runs). */
std::shared_ptr<client_entry> live_entry(int64_t id)
{
    auto e = entry_of(id);
    if (!e)
        fail(DASH_EINVAL, "no such client (never attached to the native op, or closed and collected)");
    if (!e->c.load())
        fail(DASH_EINVAL, "this Client is closed (close(), or replaced by a later dash_attn.connect())");
    return e;
}

/* The current stream of t's device, where the op is ordered; refused before anything is
 * queued when it is capturing: dashd computes in another process, which a graph cannot
 * record or replay (what _client.py's _refuse_capture says). */
cudaStream_t op_stream(const Tensor &t)
{
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess && capturing != cudaStreamCaptureStatusNone)
        fail(DASH_EINVAL, "cannot be called during CUDA graph capture (torch.cuda.graph, CUDA-graph "
                          "trees): dashd computes in another process, which a graph cannot record or "
                          "replay. Call it outside the captured region; torch.compile's "
                          "mode='reduce-overhead' leaves dash_attn's ops out of its graphs where the "
                          "PyTorch version supports the cudagraph_unsafe tag (docs/python.md)");
    return stream;
}

/* The n tensors' op (5: a forward, 9: a backward) on stream (op_stream's), under the
 * client's lock, the audit tag set first. */
void run_op(const attn_args &x, const Tensor *ts, int n, cudaStream_t stream)
{
    struct dash_cuda_ref refs[9];
    for (int i = 0; i < n; i++)
        refs[i] = ref_of(ts[i]);
    struct dash_attn a = x.a;
    if (!x.offsets_q.empty()) { /* by value: libdash copies them into the request */
        a.offsets_q = x.offsets_q.data();
        a.offsets_k = x.offsets_k.data();
        a.n_offsets = (int32_t)x.offsets_q.size();
    }
    auto e = live_entry(x.client);
    std::lock_guard<std::mutex> g(e->mu);
    struct dash_client *c = e->c.load();
    if (!c) /* closed since */
        fail(DASH_EINVAL, "this Client is closed (close(), or replaced by a later dash_attn.connect())");
    int rc = dash_set_audit(c, x.audit_step, x.audit_label ? x.audit_label->c_str() : nullptr);
    struct dash_tensor t[9];
    struct dash_result res;
    if (!rc)
        rc = dash_cuda_tensors(c, n, refs, t);
    if (!rc)
        rc = n == 5 ? dash_forward_stream(c, &a, &t[0], &t[1], &t[2], &t[3], &t[4], stream, &res)
                    : dash_backward_stream(c, &a, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7],
                                           &t[8], stream, &res);
    if (rc) {
        const char *msg = dash_last_error(c);
        fail(rc, msg && *msg ? msg : dash_strerror(rc));
    }
}

/* dashd computes first derivatives only: with create_graph, the backward's dq, dk, dv go
 * through this node, whose own backward refuses, so that a gradient of them raises
 * instead of silently leaving attention's second-order terms out (what the Python path's
 * _NoSecondOrder does). */
struct no_second_order : public torch::autograd::Function<no_second_order> {
    static variable_list forward(AutogradContext *, Tensor dq, Tensor dk, Tensor dv, Tensor q, Tensor k,
                                 Tensor v, Tensor dout)
    {
        (void)q, (void)k, (void)v, (void)dout;
        return {dq.view_as(dq), dk.view_as(dk), dv.view_as(dv)};
    }
    static variable_list backward(AutogradContext *, variable_list)
    {
        TORCH_CHECK(false, "dash_attn: second-order gradients through attention are not supported (a "
                           "gradient of a gradient, after create_graph=True): dashd computes first "
                           "derivatives only");
    }
};

/* The forward's request: [out, lse] of q, k, v (batch, seqlen, heads, head_dim, or a packed
 * batch's total, heads, head_dim; copies where the last stride is not 1), fresh and
 * contiguous; lse (batch, heads, seqlen), a packed batch's (heads, total). */
variable_list forward_of(const Tensor &q, const Tensor &k, const Tensor &v, const attn_args &x)
{
    const cudaStream_t stream = op_stream(q);
    const Tensor qc = last_dim_contiguous(q), kc = last_dim_contiguous(k), vc = last_dim_contiguous(v);
    Tensor out = at::empty_like(qc, at::MemoryFormat::Contiguous);
    Tensor lse = x.ndim == 3 ? at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat))
                             : at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
    const Tensor ts[5] = {qc, kc, vc, out, lse};
    run_op(x, ts, 5, stream);
    return {out, lse};
}

/* The backward's request: [dq, dk, dv], fresh and contiguous (copies of the inputs whose
 * last stride is not 1); a packed batch's as a dense one's, its offsets in x. */
variable_list backward_of(const Tensor &dout_, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out,
                          const Tensor &lse, const attn_args &x)
{
    const cudaStream_t stream = op_stream(q);
    const Tensor qc = last_dim_contiguous(q), kc = last_dim_contiguous(k), vc = last_dim_contiguous(v);
    const Tensor dout = last_dim_contiguous(dout_), oc = last_dim_contiguous(out);
    Tensor dq = at::empty_like(qc, at::MemoryFormat::Contiguous);
    Tensor dk = at::empty_like(kc, at::MemoryFormat::Contiguous);
    Tensor dv = at::empty_like(vc, at::MemoryFormat::Contiguous);
    const Tensor ts[9] = {qc, kc, vc, oc, lse, dout, dq, dk, dv};
    run_op(x, ts, 9, stream);
    return {dq, dk, dv};
}

std::string bytes_of(const std::vector<int32_t> &o)
{
    return std::string(reinterpret_cast<const char *>(o.data()), o.size() * sizeof(int32_t));
}

std::vector<int32_t> offsets_of(const std::string &b)
{
    std::vector<int32_t> o(b.size() / sizeof(int32_t));
    memcpy(o.data(), b.data(), o.size() * sizeof(int32_t));
    return o;
}

struct attn_fn : public torch::autograd::Function<attn_fn> {
    /* q, k, v: (batch, seqlen, heads, head_dim), or a packed batch's (total, heads,
     * head_dim) with its offsets in x; checked by the binding */
    static variable_list forward(AutogradContext *ctx, Tensor q, Tensor k, Tensor v, attn_args x)
    {
        const variable_list r = forward_of(q, k, v, x);
        const Tensor &out = r[0], &lse = r[1];
        /* the inputs as given (the backward makes its copies again, as the ctypes path
         * does): the second-order guard below ties dq, dk, dv to them */
        ctx->save_for_backward({q, k, v, out, lse});
        ctx->saved_data["client"] = x.client;
        ctx->saved_data["attn"] = std::string(reinterpret_cast<const char *>(&x.a), sizeof x.a);
        ctx->saved_data["audit_step"] = x.audit_step;
        ctx->saved_data["audit_label"] = x.audit_label ? c10::IValue(*x.audit_label) : c10::IValue();
        /* a packed batch's offsets: the backward sends the ones its forward ran with (as
         * _varlen.py's DashVarlenFunction does), kept as bytes like the request; a dense
         * call's node has none (and pays nothing for them) */
        if (x.ndim == 3) {
            ctx->saved_data["offsets_q"] = bytes_of(x.offsets_q);
            ctx->saved_data["offsets_k"] = bytes_of(x.offsets_k);
        }
        /* lse takes no gradient: autograd would otherwise allocate and zero one each backward;
         * attn() hands it out detached (marking it non-differentiable instead leaves the
         * context's list set, which compiled autograd's collection of this node asserts empty) */
        ctx->set_materialize_grads(false);
        return {out, lse};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads)
    {
        if (!grads[0].defined()) /* out took no part in what was differentiated */
            return {Tensor(), Tensor(), Tensor(), Tensor()};
        const auto saved = ctx->get_saved_variables();
        const Tensor &q = saved[0], &k = saved[1], &v = saved[2];
        attn_args x;
        x.client = ctx->saved_data["client"].toInt();
        const std::string a = ctx->saved_data["attn"].toStringRef();
        memcpy(&x.a, a.data(), sizeof x.a);
        x.audit_step = ctx->saved_data["audit_step"].toInt();
        if (!ctx->saved_data["audit_label"].isNone())
            x.audit_label = ctx->saved_data["audit_label"].toStringRef();
        if (ctx->saved_data.find("offsets_q") != ctx->saved_data.end()) {
            x.ndim = 3;
            x.offsets_q = offsets_of(ctx->saved_data["offsets_q"].toStringRef());
            x.offsets_k = offsets_of(ctx->saved_data["offsets_k"].toStringRef());
        }
        const variable_list g = backward_of(grads[0], q, k, v, saved[3], saved[4], x);
        const Tensor &dq = g[0], &dk = g[1], &dv = g[2];
        if (torch::autograd::GradMode::is_enabled()) { /* create_graph */
            auto g = no_second_order::apply(dq, dk, dv, q, k, v, grads[0]);
            return {g[0], g[1], g[2], Tensor()};
        }
        return {dq, dk, dv, Tensor()};
    }
};

/* The ops' arguments as a request's (the client's entry checked, the tensors CUDA and of
 * ndim dimensions: 4, or 3 for a packed batch). */
attn_args args_of(std::initializer_list<const Tensor *> ts, int64_t client, int64_t dtype, double scale,
                  bool causal, int64_t window_left, int64_t window_right, double softcap, int64_t schedule,
                  int64_t audit_step, std::optional<std::string> audit_label, int ndim = 4)
{
    live_entry(client);
    /* the request carries one dtype, which dashd reads every tensor as: a tensor of another
     * (a direct call of torch.ops.dash_torch.*) would be read with the wrong element size and
     * out / dq... (made like q) left partly unwritten - silently wrong, never refused */
    const at::ScalarType want = dtype == DASH_F32    ? at::kFloat
                                : dtype == DASH_F16  ? at::kHalf
                                : dtype == DASH_BF16 ? at::kBFloat16
                                : dtype == DASH_F64  ? at::kDouble
                                                     : at::ScalarType::Undefined;
    for (const Tensor *t : ts) {
        TORCH_CHECK(t->is_cuda() && t->dim() == ndim, "dash_attn[", DASH_EINVAL, "]: the native op takes ",
                    ndim, "-D CUDA tensors", ndim == 3 ? " in a packed batch" : "",
                    " (the binding sends others through its ctypes path)");
        TORCH_CHECK(t->scalar_type() == want, "dash_attn[", DASH_EINVAL, "]: a tensor of ", t->scalar_type(),
                    " in an op of dtype ", dtype, ": q, k, v (out, dout) must all be of the op's dtype");
    }
    attn_args x;
    x.ndim = ndim;
    x.client = client;
    memset(&x.a, 0, sizeof x.a);
    x.a.dtype = (enum dash_dtype)dtype;
    x.a.mask = causal ? DASH_MASK_CAUSAL : DASH_MASK_FULL;
    x.a.scale = (float)scale;
    x.a.schedule = (enum dash_schedule)schedule;
    if (window_left != -1 || window_right != -1) {
        x.a.window = 1;
        x.a.window_left = (int32_t)window_left;
        x.a.window_right = (int32_t)window_right;
    }
    x.a.softcap = (float)softcap;
    x.audit_step = audit_step;
    x.audit_label = std::move(audit_label);
    return x;
}

std::vector<Tensor> attn(const Tensor &q, const Tensor &k, const Tensor &v, int64_t client, int64_t dtype,
                         double scale, bool causal, int64_t window_left, int64_t window_right, double softcap,
                         int64_t schedule, int64_t audit_step, std::optional<std::string> audit_label)
{
    const variable_list r = attn_fn::apply(q, k, v,
                                           args_of({&q, &k, &v}, client, dtype, scale, causal, window_left,
                                                   window_right, softcap, schedule, audit_step,
                                                   std::move(audit_label)));
    return {r[0], r[1].detach()};
}

/* The forward and the backward alone, no autograd node: what dash_attn's custom ops
 * (dash_attn::fwd, dash_attn::bwd: torch.compile's graphs, opcheck) run on CUDA tensors. */
std::vector<Tensor> fwd(const Tensor &q, const Tensor &k, const Tensor &v, int64_t client, int64_t dtype,
                        double scale, bool causal, int64_t window_left, int64_t window_right, double softcap,
                        int64_t schedule, int64_t audit_step, std::optional<std::string> audit_label)
{
    return forward_of(q, k, v,
                      args_of({&q, &k, &v}, client, dtype, scale, causal, window_left, window_right, softcap,
                              schedule, audit_step, std::move(audit_label)));
}

/* A packed variable-length batch (flash-attn's varlen) as one node, as attn: q (total_q,
 * heads_q, head_dim), k, v (total_k, heads_kv, head_dim), the offsets (batch + 1 each,
 * checked by the binding - _varlen.py's _offsets - and by dashd) by value in the request,
 * as _varlen.py's CUDA path sends them; lse (heads_q, total_q). The node keeps the offsets
 * for its backward. */
std::vector<Tensor> attn_varlen(const Tensor &q, const Tensor &k, const Tensor &v, at::IntArrayRef offsets_q,
                                at::IntArrayRef offsets_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                bool batch_invariant, int64_t client, int64_t dtype, double scale, bool causal,
                                int64_t window_left, int64_t window_right, double softcap, int64_t schedule,
                                int64_t audit_step, std::optional<std::string> audit_label)
{
    attn_args x = args_of({&q, &k, &v}, client, dtype, scale, causal, window_left, window_right, softcap, schedule,
                          audit_step, std::move(audit_label), 3);
    /* what the binding refuses before it calls (ValueError there): a direct caller gets
     * DASH_EINVAL, never offsets cut to 32 bits */
    if (offsets_q.size() != offsets_k.size() || offsets_q.size() < 2 || offsets_q.size() > (1u << 24) + 1)
        fail(DASH_EINVAL, "offsets_q and offsets_k must both have batch + 1 >= 2 entries (batch at most 2^24); "
                          "got " + std::to_string(offsets_q.size()) + " and " + std::to_string(offsets_k.size()));
    const auto int32 = [](int64_t i) { return i >= INT32_MIN && i <= INT32_MAX; };
    if (!int32(max_seqlen_q) || !int32(max_seqlen_k))
        fail(DASH_EINVAL, "max_seqlen_q / max_seqlen_k beyond int32");
    x.offsets_q.resize(offsets_q.size());
    x.offsets_k.resize(offsets_k.size());
    for (size_t i = 0; i < offsets_q.size(); i++) {
        if (!int32(offsets_q[i]) || !int32(offsets_k[i]))
            fail(DASH_EINVAL, "an offset beyond int32");
        x.offsets_q[i] = (int32_t)offsets_q[i];
        x.offsets_k[i] = (int32_t)offsets_k[i];
    }
    x.a.max_seqlen_q = (int32_t)max_seqlen_q;
    x.a.max_seqlen_k = (int32_t)max_seqlen_k;
    x.a.batch_invariant = batch_invariant ? 1 : 0;
    const variable_list r = attn_fn::apply(q, k, v, std::move(x));
    return {r[0], r[1].detach()};
}

std::vector<Tensor> bwd(const Tensor &dout, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out,
                        const Tensor &lse, int64_t client, int64_t dtype, double scale, bool causal,
                        int64_t window_left, int64_t window_right, double softcap, int64_t schedule,
                        int64_t audit_step, std::optional<std::string> audit_label)
{
    const attn_args x = args_of({&dout, &q, &k, &v, &out}, client, dtype, scale, causal, window_left, window_right,
                                softcap, schedule, audit_step, std::move(audit_label));
    TORCH_CHECK(lse.is_cuda(), "dash_attn[", DASH_EINVAL, "]: the native op takes CUDA tensors");
    return backward_of(dout, q, k, v, out, lse, x);
}

} // namespace

TORCH_LIBRARY(dash_torch, m)
{
    m.def("attn(Tensor q, Tensor k, Tensor v, int client, int dtype, float scale, bool causal, "
          "int window_left, int window_right, float softcap, int schedule, int audit_step, "
          "str? audit_label) -> Tensor[]",
          &attn);
    m.def("fwd(Tensor q, Tensor k, Tensor v, int client, int dtype, float scale, bool causal, "
          "int window_left, int window_right, float softcap, int schedule, int audit_step, "
          "str? audit_label) -> Tensor[]",
          &fwd);
    m.def("attn_varlen(Tensor q, Tensor k, Tensor v, int[] offsets_q, int[] offsets_k, int max_seqlen_q, "
          "int max_seqlen_k, bool batch_invariant, int client, int dtype, float scale, bool causal, "
          "int window_left, int window_right, float softcap, int schedule, int audit_step, "
          "str? audit_label) -> Tensor[]",
          &attn_varlen);
    m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, int client, int dtype, "
          "float scale, bool causal, int window_left, int window_right, float softcap, int schedule, "
          "int audit_step, str? audit_label) -> Tensor[]",
          &bwd);
}

extern "C" {

int dash_torch_attach(int64_t id, void *c)
{
    std::lock_guard<std::mutex> g(entries_mu);
    auto &e = entries[id];
    if (!e)
        e = std::make_shared<client_entry>();
    e->c = static_cast<struct dash_client *>(c);
    return 0;
}

void dash_torch_detach(int64_t id)
{
    auto e = entry_of(id);
    if (e)
        e->c = nullptr;
}

void dash_torch_forget(int64_t id)
{
    std::lock_guard<std::mutex> g(entries_mu);
    entries.erase(id);
}

int64_t dash_torch_entries(void)
{
    std::lock_guard<std::mutex> g(entries_mu);
    return (int64_t)entries.size();
}

void dash_torch_lock(int64_t id)
{
    auto e = entry_of(id);
    if (e) {
        e->mu.lock();
        e->owner.store(std::this_thread::get_id());
    }
}

void dash_torch_unlock(int64_t id)
{
    auto e = entry_of(id);
    if (e) {
        e->owner.store(std::thread::id());
        e->mu.unlock();
    }
}

int dash_torch_unlock_if_mine(int64_t id)
{
    auto e = entry_of(id);
    if (!e || e->owner.load() != std::this_thread::get_id())
        return 0;
    e->owner.store(std::thread::id());
    e->mu.unlock();
    return 1;
}

const char *dash_torch_built_for(void)
{
    return TORCH_VERSION;
}
}
