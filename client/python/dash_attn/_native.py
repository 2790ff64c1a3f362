# SPDX-License-Identifier: BSD-3-Clause
"""The native op (client/torch/dash_torch.h): an eager call on dense CUDA tensors as one
C++ autograd node, so that neither the forward nor the backward (which autograd runs on
its device thread) crosses Python or ctypes between PyTorch and libdash. Same requests,
same bits as the ctypes path (_client.py's _forward_cuda / _backward_cuda); it takes
a fraction of their host time (bench/percall.py's rows "native" and "ctypes"). An eager
packed batch on CUDA tensors (flash_attn_varlen_func) likewise: varlen_attention, the
requests of _varlen.py's DashVarlenFunction.

The library is libdash_torch_<torch version>.so, built by `make torch-op` against the
torch of the venv (or TORCH_DIR), looked for beside the libdash this package loaded, then
in the package; $DASH_TORCH_LIBRARY names another (an error if it cannot be loaded).
$DASH_NATIVE=0 leaves it unloaded: every call then takes the ctypes path. Without it
(torch of another version, no CUDA in torch, not built) the ctypes path serves as before.

Once loaded, every Client's lock is the native library's lock of that client (the C++
backward on autograd's thread uses the same libdash client as Python does), taken and
given back through ctypes, which releases the GIL while it waits.
"""
import ctypes
import os
import re
import threading

from . import _lib

try:
    import torch
except ImportError:  # numpy-only use
    torch = None

_so = None        # the library (ctypes), once loaded
_op = None        # torch.ops.dash_torch.attn.default
_fwd = _bwd = None  # torch.ops.dash_torch.fwd / bwd .default (no autograd node: the custom ops')
_varlen_op = None  # torch.ops.dash_torch.attn_varlen.default (None: a library built before it)
_tried = False
_load_lock = threading.Lock()
why_not = None    # why the native op is not in use (None: it is, or not tried yet)


def _candidates():
    name = f"libdash_torch_{torch.__version__}.so"
    if os.sep in _lib.path:
        yield os.path.join(os.path.dirname(os.path.abspath(_lib.path)), name)
    yield os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def load():
    """Load the native op once; True when it serves this process's calls."""
    with _load_lock:  # Clients made at once by several threads agree
        return _load()


def _load():
    global _so, _op, _fwd, _bwd, _varlen_op, _tried, why_not
    if _tried:
        return _so is not None
    _tried = True
    if torch is None:
        why_not = "no torch"
        return False
    if os.environ.get("DASH_NATIVE", "1") == "0":
        why_not = "DASH_NATIVE=0"
        return False
    env = os.environ.get("DASH_TORCH_LIBRARY")
    path = env or next((p for p in _candidates() if os.path.exists(p)), None)
    if path is None:
        why_not = f"no libdash_torch_{torch.__version__}.so (make torch-op)"
        return False
    try:
        so = ctypes.CDLL(path)
        built_for = so.dash_torch_built_for
        built_for.restype = ctypes.c_char_p
        if built_for().decode() != torch.__version__.split("+")[0]:
            raise OSError(f"built for torch {built_for().decode()}, this is {torch.__version__}")
        torch.ops.load_library(path)
        op = torch.ops.dash_torch.attn.default
        fwd, bwd = torch.ops.dash_torch.fwd.default, torch.ops.dash_torch.bwd.default
        # a library built before packed batches had their op still serves dense calls;
        # packed ones then take the ctypes path (varlen_ok)
        varlen = getattr(torch.ops.dash_torch, "attn_varlen", None)
        # the binding's C functions (a library from an older build lacks some: not loaded)
        for name, args in (("dash_torch_attach", [ctypes.c_int64, ctypes.c_void_p]),
                           ("dash_torch_detach", [ctypes.c_int64]),
                           ("dash_torch_forget", [ctypes.c_int64]),
                           ("dash_torch_lock", [ctypes.c_int64]),
                           ("dash_torch_unlock", [ctypes.c_int64]),
                           ("dash_torch_unlock_if_mine", [ctypes.c_int64])):
            getattr(so, name).argtypes = args
        so.dash_torch_attach.restype = ctypes.c_int
        so.dash_torch_entries.restype = ctypes.c_int64
        for name in ("dash_torch_detach", "dash_torch_forget", "dash_torch_lock", "dash_torch_unlock"):
            getattr(so, name).restype = None
    except (OSError, RuntimeError, AttributeError) as e:
        if env:  # an override: load that one or fail, never fall back
            raise ImportError(f"dash_attn: cannot load DASH_TORCH_LIBRARY={env}: {e}") from None
        why_not = f"{path}: {e}"
        return False
    _so, _op, _fwd, _bwd = so, op, fwd, bwd
    _varlen_op = varlen.default if varlen is not None else None
    return True


class Lock:
    """Client cid's lock in the native library (the C++ op takes the same one)."""
    __slots__ = ("_id",)

    def __init__(self, cid):
        self._id = cid
        _so.dash_torch_attach(cid, None)  # the entry (and its lock) first, the client later

    def __enter__(self):
        try:
            _so.dash_torch_lock(self._id)
        except BaseException:  # a KeyboardInterrupt right after the take: give it back
            _so.dash_torch_unlock_if_mine(self._id)
            raise
        return self

    def __exit__(self, *exc):
        _so.dash_torch_unlock(self._id)
        return False

    def __del__(self):
        # the Client is collected: its entry goes (else the map grows by one a Client)
        if _so is not None:
            _so.dash_torch_forget(self._id)


def attach(cid, c):
    """Client cid's libdash client is c (a ctypes c_void_p)."""
    _so.dash_torch_attach(cid, c)


def detach(cid):
    """Client cid is closing (its lock held): ops naming it fail from now on."""
    _so.dash_torch_detach(cid)


_ERR = re.compile(r"dash_attn\[(-?\d+)\]: (.*)", re.S)


def _dash_error(e):
    """The DashError a native failure stands for (its message "dash_attn[CODE]: ...")."""
    from . import _client
    m = _ERR.search(str(e))
    if not m:
        return e
    text = m.group(2).split("\nException raised from")[0].strip()
    return _client.DashError(int(m.group(1)), text)


_FORWARD_RESULT = {"schedule": None, "wave": None, "block_m": 0, "block_n": 0,
                   "queue_us": 0, "run_us": 0, "backend": "cuda"}


def _params(q, scale, causal, left, right, softcap, schedule, step, label):
    """The native ops' arguments after the tensors and the client: the parameters checked
    as Client._attn checks them."""
    from . import _client
    code = _client.schedule_code(schedule)
    _client._refuse_cuda_f64(q)
    return (_client._dtype_code(q), _client.float32_arg("softmax_scale", scale), causal, left, right,
            _client.float32_arg("softcap", softcap), code, -1 if step is None else int(step), label)


def _run(op, *args):
    """op(*args), a native failure raised as the DashError it stands for."""
    try:
        return op(*args)
    except RuntimeError as e:
        raise _dash_error(e) from None


def attention(c, q, k, v, scale, causal, left, right, softcap, schedule):
    """(out, lse) of dense CUDA tensors through the native op, differentiable in q, k, v
    (its C++ node); the inputs checked as _ops.attention checks them, the parameters here
    as Client._attn does."""
    from . import _client
    args = _params(q, scale, causal, left, right, softcap, schedule, *_client.current_audit())
    out, lse = _run(_op, q, k, v, c.id, *args)
    c.last_result = dict(_FORWARD_RESULT)
    return out, lse


def forward(c, q, k, v, scale, causal, left, right, softcap, schedule, step, label):
    """(out, lse) of 4-D CUDA tensors (checked by the caller) with the audit tag (step,
    label), no autograd node: the custom op dash_attn::fwd's implementation (_ops.py; what
    torch.compile's graphs call) where the native op is loaded. The eager node's request."""
    from . import _client
    left, right = _client.window_pair((left, right))  # an op's ints, as Client._attn checks them
    args = _params(q, scale, causal, left, right, softcap, schedule, step, label)
    out, lse = _run(_fwd, q, k, v, c.id, *args)
    c.last_result = dict(_FORWARD_RESULT)
    return out, lse


def backward(c, dout, q, k, v, out, lse, scale, causal, left, right, softcap, schedule, step,
             label):
    """(dq, dk, dv) likewise: dash_attn::bwd's implementation (last_result is left as the
    forward set it, as after the eager node's backward)."""
    from . import _client
    left, right = _client.window_pair((left, right))
    args = _params(q, scale, causal, left, right, softcap, schedule, step, label)
    return tuple(_run(_bwd, dout, q, k, v, out, lse, c.id, *args))


def varlen_ok(c, q):
    """Whether an eager packed batch on q (torch, checked by the caller) takes the native op:
    CUDA tensors, a client using the native library, a library that has attn_varlen."""
    return c._native and _varlen_op is not None and q.is_cuda


def varlen_attention(c, q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window, softcap,
                     schedule, batch_invariant):
    """(out, lse) of a packed batch of CUDA tensors through the native op, differentiable in
    q, k, v (its C++ node, which keeps the offsets for its backward). The checks and the
    request are DashVarlenFunction's (_varlen.py), in its order and by its functions: the
    tensors, the offsets read once (a CUDA cu_seqlens copied to the host, one wait), the
    request's parameters as the ctypes struct holds them - so the op gets the very values
    the ctypes path would send - then the offsets by value and the audit tag."""
    from . import _client, _varlen
    _varlen._check_packed([("q", q), ("k", k), ("v", v)])
    cu_q, cu_k = _varlen._host_offsets(cu_q, cu_k)
    a, cq, ck = _varlen._prepare(c, q, cu_q, cu_k, max_q, max_k, causal, scale, window,
                                 softcap, schedule, batch_invariant)
    _varlen._same_batch(cq, ck)
    step, label = _client.current_audit()
    left, right = (a.window_left, a.window_right) if a.window else (-1, -1)
    out, lse = _run(_varlen_op, q, k, v, cq.tolist(), ck.tolist(), a.max_seqlen_q,
                    a.max_seqlen_k, bool(a.batch_invariant), c.id, a.dtype, a.scale,
                    a.mask == _lib.DASH_MASK_CAUSAL, left, right, a.softcap, a.schedule,
                    -1 if step is None else int(step), label)
    c.last_result = dict(_FORWARD_RESULT)
    return out, lse
