// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_torch.cpp - the native PyTorch op (dash_torch.h says what and why): the clients'
 * entries and locks, the op's forward and backward as a torch::autograd::Function, and
 * its registration. The requests are those of _client.py's _forward_cuda and
 * _backward_cuda: q, k, v (and out, dout) with their last stride 1 (a copy otherwise),
 * fresh contiguous out / lse / dq / dk / dv, the refs of dash_cuda_tensors, the
 * stream-ordered call on the tensors' device's current stream, the audit tag set first.
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
#include <new>
#include <pthread.h>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

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

/* What the forward's arguments say about the op, kept for the backward. */
struct attn_args {
    int64_t client;
    struct dash_attn a;
    int64_t audit_step;
    std::optional<std::string> audit_label;
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
        rc = n == 5 ? dash_forward_stream(c, &x.a, &t[0], &t[1], &t[2], &t[3], &t[4], stream, &res)
                    : dash_backward_stream(c, &x.a, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7],
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

/* The forward's request: [out, lse] of q, k, v (batch, seqlen, heads, head_dim; copies
 * where the last stride is not 1), fresh and contiguous. */
variable_list forward_of(const Tensor &q, const Tensor &k, const Tensor &v, const attn_args &x)
{
    const cudaStream_t stream = op_stream(q);
    const Tensor qc = last_dim_contiguous(q), kc = last_dim_contiguous(k), vc = last_dim_contiguous(v);
    Tensor out = at::empty_like(qc, at::MemoryFormat::Contiguous);
    Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
    const Tensor ts[5] = {qc, kc, vc, out, lse};
    run_op(x, ts, 5, stream);
    return {out, lse};
}

/* The backward's request: [dq, dk, dv], fresh and contiguous (copies of the inputs whose
 * last stride is not 1). */
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

struct attn_fn : public torch::autograd::Function<attn_fn> {
    /* q, k, v: (batch, seqlen, heads, head_dim), checked by the binding */
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
        const variable_list g = backward_of(grads[0], q, k, v, saved[3], saved[4], x);
        const Tensor &dq = g[0], &dk = g[1], &dv = g[2];
        if (torch::autograd::GradMode::is_enabled()) { /* create_graph */
            auto g = no_second_order::apply(dq, dk, dv, q, k, v, grads[0]);
            return {g[0], g[1], g[2], Tensor()};
        }
        return {dq, dk, dv, Tensor()};
    }
};

/* The ops' arguments as a request's (the client's entry checked, the tensors CUDA and 4-D). */
attn_args args_of(std::initializer_list<const Tensor *> ts, int64_t client, int64_t dtype, double scale,
                  bool causal, int64_t window_left, int64_t window_right, double softcap, int64_t schedule,
                  int64_t audit_step, std::optional<std::string> audit_label)
{
    live_entry(client);
    for (const Tensor *t : ts)
        TORCH_CHECK(t->is_cuda() && t->dim() == 4, "dash_attn[", DASH_EINVAL,
                    "]: the native op takes 4-D CUDA tensors (the binding sends others through its ctypes path)");
    attn_args x;
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
