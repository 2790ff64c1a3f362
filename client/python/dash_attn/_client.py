# SPDX-License-Identifier: BSD-3-Clause
"""One connection to dashd, and the two ways tensors reach it.

CUDA tensors (torch) are passed in place: each tensor's allocation is registered once
(libdash's dash_cuda_view keeps the registrations, keyed by the allocation's IPC handle,
so PyTorch's caching allocator costs one registration per cached block) and the op is
ordered on the caller's current stream with interprocess events (dash_*_stream): no
device-wide synchronise, and the call returns once dashd has queued the work.

CPU tensors (torch or numpy) are copied into one shared-memory buffer per client (grown
when an op needs more), the op runs on the daemon's CPU engine (or is staged through its
GPU), and the outputs are copied out into new arrays of the caller's kind.

A libdash client is not thread-safe (dash.h): every call here holds the client's lock, so
one Client may serve several threads (PyTorch runs backward on its own threads).
"""
import atexit
import contextlib
import ctypes
import errno
import itertools
import math
import numbers
import os
import struct
import sys
import threading
import weakref

from . import _lib, _native

try:
    import torch
except ImportError:  # numpy-only use
    torch = None
try:
    import numpy as np
except ImportError:
    np = None

_ALIGN = 256


class DashError(RuntimeError):
    """A libdash or dashd error: code (negative), name ("DASH_ESHAPE"), and the daemon's
    message when it gave one."""

    def __init__(self, code, message=""):
        self.code = code
        self.name = _lib.dash_errname(code).decode()
        text = message or _lib.dash_strerror(code).decode()
        super().__init__(f"{self.name}: {text}")
        self.message = text


def _is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


_DTYPES = {}  # (torch?, dtype) -> code, filled on first use (torch and numpy are optional)


def _dtype_tables():
    # both tables at once (one dict.update): a thread that finds _DTYPES filled finds both,
    # even while another thread's first call is still building them
    tables = {}
    if torch is not None:
        tables[True] = {torch.float32: _lib.DASH_F32, torch.float16: _lib.DASH_F16,
                        torch.bfloat16: _lib.DASH_BF16, torch.float64: _lib.DASH_F64}
    if np is not None:
        tables[False] = {np.dtype(np.float32): _lib.DASH_F32, np.dtype(np.float16): _lib.DASH_F16,
                         np.dtype(np.float64): _lib.DASH_F64}
    _DTYPES.update(tables)


def _dtype_code(x):
    if not _DTYPES:
        _dtype_tables()
    table = _DTYPES.get(_is_torch(x), {})
    dt = x.dtype
    if dt not in table:
        raise TypeError(f"dash_attn: dtype {dt} is not served (float16, bfloat16, float32; "
                        "float64 on the CPU engine)")
    return table[dt]


def _itemsize(x):
    return x.element_size() if _is_torch(x) else x.itemsize


class _Audit(threading.local):
    def __init__(self):
        self.stack = [(None, None)]


_audit = _Audit()


def current_audit():
    return _audit.stack[-1]


def push_audit(step, label):
    _audit.stack.append((step, label))


INT64_MAX = 2**63 - 1


def audit_tag(step, label):
    """(step, label) as the audit record will carry them, or TypeError / ValueError. The
    step goes to libdash as an int64 where < 0 means "no step", and the label as a C
    string, so without these checks a step of -5 or 2**63 was silently no step, 2**64 + 7
    was step 7, 3.7 was 3, and a label "a\0b" was "a". A step that is not a plain number
    (a value torch.compile traces) is the compiled op's to carry and is passed as it is."""
    if step is not None and (torch is None or not isinstance(step, (torch.SymInt,
                                                                    torch.Tensor))):
        if isinstance(step, bool):
            raise TypeError(f"dash_attn: audit step must be an integer, not {step!r}")
        try:
            i = int(step)
            exact = i == step
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise TypeError(f"dash_attn: audit step must be an integer, not {step!r}") \
                from None
        if not exact:
            raise TypeError(f"dash_attn: audit step must be an integer, not {step!r}")
        if not 0 <= i <= INT64_MAX:
            raise ValueError(f"dash_attn: audit step={i} is outside 0..{INT64_MAX} (None: "
                             "no step)")
        step = i
    if label is not None:
        if not isinstance(label, str):
            raise TypeError(f"dash_attn: audit label must be a str, not {label!r}")
        if "\0" in label:
            raise ValueError(f"dash_attn: audit label {label!r} holds a NUL character")
    return step, label


def pop_audit():
    if len(_audit.stack) > 1:
        _audit.stack.pop()


# audit blocks entered while torch.compile traces: the thread-local stack above would be
# pushed and popped at trace time only, so the tag would never reach the compiled ops.
# These blocks are kept here instead, where the traced call (_ops.attention) reads them
# and passes them to the op as arguments (the label a constant of the graph, the step
# whatever the traced code made it, e.g. an input). Empty outside tracing.
traced_audit = []


def compiling():
    """Whether torch.compile is tracing the caller."""
    f = getattr(getattr(torch, "compiler", None), "is_compiling", None) if torch else None
    return bool(f and f())


_open = weakref.WeakSet()  # this process's open clients, closed at exit (below)
_by_id = weakref.WeakValueDictionary()  # Client.id -> Client, for the torch ops (_ops.py)
_next_id = itertools.count(1)


def client_by_id(cid, like=None):
    """The client a torch op names: 0 is the process's shared client for the device of
    tensor `like` (default_client), others a Client's .id (an op cannot take a Python
    object as an argument)."""
    if cid == 0:
        return default_client(device_of(like))
    c = _by_id.get(cid)
    if c is None:
        raise RuntimeError(f"dash_attn: client {cid} is gone (closed and collected); pass a "
                           "live Client, or none for the default one")
    return c


@atexit.register
def _close_at_exit():
    """Close every client this process opened, so that its session ends and its shared
    memory is unlinked now: __del__ is not promised to run at exit, and an autograd graph
    that still holds a client (a backward's context does) kept the buffer in /dev/shm and
    the session open until dashd's idle timeout. A forked child's inherited clients are the
    parent's and stay untouched (dash.h)."""
    for c in list(_open):
        if c._pid == os.getpid():
            try:
                c.close()
            except Exception:
                pass


def _env_int(names):
    """The first of the environment variables names that is set, as (name, int), else None."""
    for name in names:
        text = os.environ.get(name)
        if text is not None and text.strip() != "":
            try:
                return name, int(text)
            except ValueError:
                raise ValueError(f"dash_attn: ${name}={text!r} is not an integer") from None
    return None


def distributed_rank(rank=None, world_size=None):
    """(rank, world_size) of this process in a distributed run, or (None, None): the
    arguments when given, else $DASH_RANK / $DASH_WORLD_SIZE, else torchrun's $RANK /
    $WORLD_SIZE. Both or neither; 0 <= rank < world_size (ValueError otherwise)."""
    if rank is None and world_size is None:
        r = _env_int(("DASH_RANK", "RANK"))
        w = _env_int(("DASH_WORLD_SIZE", "WORLD_SIZE"))
        if r is None and w is None:
            return None, None
        if r is None or w is None:
            raise ValueError("dash_attn: $" + (r or w)[0] + " is set but $"
                             + ("WORLD_SIZE" if w is None else "RANK") + " is not; set both "
                             "(or DASH_RANK and DASH_WORLD_SIZE)")
        (rname, rank), (wname, world_size) = r, w
        where = f" (${rname}, ${wname})"
    else:
        where = ""
    if rank is None or world_size is None:
        raise ValueError("dash_attn: rank and world_size go together")
    rank, world_size = int(rank), int(world_size)
    if not 0 <= rank < world_size or world_size >= 1 << 32:
        raise ValueError(f"dash_attn: rank {rank} of world size {world_size}{where}: need "
                         "0 <= rank < world_size")
    return rank, world_size


class Client:
    """A connection to dashd. endpoint None: $DASHD_ENDPOINT or the default one
    (dash_default_endpoint). run_tag None: $DASH_RUN_TAG. rank, world_size None: from the
    environment (distributed_rank: torchrun's RANK and WORLD_SIZE); dashd writes them into
    the audit record of every op, so runs can be compared rank by rank."""

    def __init__(self, endpoint=None, client_name=None, run_tag=None, timeout_ms=0,
                 rank=None, world_size=None):
        self.id = next(_next_id)
        # the native op's lock of this client where that op is loaded (its C++ backward
        # uses the client from autograd's thread): _native.py
        self._native = _native.load()
        self._lock = _native.Lock(self.id) if self._native else threading.Lock()
        self._pid = os.getpid()
        self._refs = self._tensors = None  # _cuda_tensors' arrays, made on first use
        self._tag_sent = None  # the audit tag libdash holds (dash_set_audit), once set
        if client_name is None:
            client_name = "python:" + os.path.basename(sys.argv[0] or "python")
        if run_tag is None:
            run_tag = os.environ.get("DASH_RUN_TAG")
        for what, x in (("client_name", client_name), ("run_tag", run_tag)):
            # a C string each: a NUL would silently end it ("run\0-7" logged as "run")
            if x is not None and not isinstance(x, str):
                raise TypeError(f"dash_attn: {what} must be a str, not {x!r}")
            if x is not None and "\0" in x:
                raise ValueError(f"dash_attn: {what} {x!r} holds a NUL character")
        self.rank, self.world_size = distributed_rank(rank, world_size)
        self._opts = _lib.DashConnectOpts(client_name.encode()[:255],
                                          run_tag.encode()[:255] if run_tag else None,
                                          int(timeout_ms), 0, self.world_size or 0,
                                          self.rank or 0)
        self._c = ctypes.c_void_p()
        why = ctypes.create_string_buffer(1024)
        rc = _lib.dash_connect_explain(endpoint.encode() if endpoint else None,
                                       ctypes.byref(self._opts), ctypes.byref(self._c), why,
                                       len(why))
        if rc:
            # libdash's sentence names the endpoint and what is wrong there (no socket,
            # nothing listening, permission denied, no answer, not trusted)
            raise DashError(rc, why.value.decode(errors="replace"))
        if self._native:
            _native.attach(self.id, self._c)
        self._shm = None
        self._shm_size = 0
        self.last_result = None
        _by_id[self.id] = self
        _open.add(self)

    # ---- lifetime -----------------------------------------------------------------------

    def close(self):
        with self._lock:
            if self._c:
                if self._native:
                    _native.detach(self.id)
                _lib.dash_close(self._c)
                self._c = ctypes.c_void_p()
                # dash_close freed the shared-memory buffer: its handle must not be used again
                self._shm = None
                self._shm_size = 0

    def _live(self):
        """Raise DashError (DASH_EINVAL) once the client is closed (close(), a later
        connect() replacing it, exit): its libdash client and shared memory are gone."""
        if not self._c:
            raise DashError(-errno.EINVAL, "dash_attn: this Client is closed (close(), or "
                            "replaced by a later dash_attn.connect())")

    def __del__(self):
        # A forked child's inherited clients are the parent's (as for the exit handler), and
        # a lock a parent's thread held at the fork stays held in the child: closing here
        # would wait for it for ever at the child's exit.
        pid = getattr(self, "_pid", None)  # None: __init__ never ran (or failed early)
        if pid is None or pid != os.getpid():
            return
        try:
            self.close()
        except Exception:
            pass

    def _check(self, rc):
        if rc:
            msg = _lib.dash_last_error(self._c)
            raise DashError(rc, msg.decode(errors="replace") if msg else "")

    def synchronize(self):
        """Wait until dashd has answered every op of this client on CUDA tensors (ordered on
        a CUDA stream, they return before the daemon answers) and raise DashError for the
        first one that failed; otherwise such a failure is raised by the next call."""
        with self._lock:
            self._check(_lib.dash_sync(self._c))

    def ping(self):
        rtt = ctypes.c_uint64()
        with self._lock:
            self._check(_lib.dash_ping(self._c, -1, ctypes.byref(rtt)))
        return rtt.value

    # ---- parameters ---------------------------------------------------------------------

    @staticmethod
    def _attn(dtype, causal, scale, schedule, wave, window_size=None, softcap=None):
        code = schedule_code(schedule)
        causal = bool_arg("causal", causal)
        a = _lib.DashAttn(dtype, _lib.DASH_MASK_CAUSAL if causal else _lib.DASH_MASK_FULL,
                          float32_arg("softmax_scale", scale), code,
                          int(wave or 0), 0, 0)
        left, right = window_pair(window_size)
        if (left, right) != (-1, -1):
            a.window, a.window_left, a.window_right = 1, left, right
        a.softcap = float32_arg("softcap", softcap)
        return a

    def _tag(self):
        """Give libdash the thread's audit tag for the next op (it keeps it until changed:
        a call only when the tag differs from the last one given)."""
        self._live()  # every op's first call into libdash under the lock
        tag = current_audit()
        if tag == self._tag_sent and not self._native:  # the native op sets its own
            return
        step, label = tag
        rc = _lib.dash_set_audit(self._c, -1 if step is None else int(step),
                                 label.encode() if label else None)
        self._check(rc)
        self._tag_sent = tag

    def _record(self, res, backward):
        # a forward has no backward schedule (nor a wave): None, not what the wire carries
        self.last_result = {
            "schedule": _lib.SCHEDULE_NAMES.get(res.schedule, "?") if backward else None,
            "wave": res.wave if backward else None,
            "block_m": res.block_m, "block_n": res.block_n, "queue_us": res.queue_us,
            "run_us": res.run_us, "backend": res.backend.decode(errors="replace"),
        }

    # ---- CUDA: in place, stream-ordered ---------------------------------------------------

    # a ref as dash.h's struct dash_cuda_ref lays it out: ptr, ndim, elem_size, shape[4],
    # strides[4] (native byte order and alignment, as ctypes has it; test_cpu.py checks the size)
    _REF = struct.Struct("@Pii4q4q")

    _PAD = (0, 0, 0, 0)

    def _pack_refs(self, tensors):
        """Write the refs of [(tensor, ndim)] into this client's array (dash.h's struct
        dash_cuda_ref each: data_ptr, ndim, element size, shape and strides padded to 4).
        The 4-D ones - most of a call's - in one pack each, without padding tuples."""
        if self._refs is None:
            self._refs = (_lib.DashCudaRef * 9)()
            self._tensors = (_lib.DashTensor * 9)()
        buf = memoryview(self._refs).cast("B")
        pack = self._REF.pack_into
        size = self._REF.size
        at = 0
        for t, ndim in tensors:
            sh = t.shape
            if len(sh) != ndim:
                raise ValueError(f"dash_attn: expected a {ndim}-dim tensor, got shape "
                                 f"{tuple(sh)}")
            if ndim == 4:
                pack(buf, at, t.data_ptr(), 4, t.element_size(), *sh, *t.stride())
            else:
                pad = self._PAD[ndim:]
                pack(buf, at, t.data_ptr(), ndim, t.element_size(), *sh, *pad, *t.stride(), *pad)
            at += size

    def _cuda_tensors(self, tensors):
        """The dash_tensors of CUDA tensors [(tensor, ndim)], in one call into libdash
        (dash_cuda_tensors): each tensor's allocation is looked up by the driver and
        registered with the daemon the first time. Returns a ctypes array owned by this
        client, valid until its next call (the caller holds self._lock)."""
        self._pack_refs(tensors)
        self._check(_lib.dash_cuda_tensors(self._c, len(tensors), self._refs, self._tensors))
        return self._tensors

    @staticmethod
    def _last_dim_contiguous(t):
        return t if t.stride(-1) == 1 else t.contiguous()

    @staticmethod
    def _refuse_capture(device=None):
        """dashd's work on CUDA tensors runs in another process, ordered on the caller's
        stream by interprocess events and a request over a socket: a CUDA graph records
        neither, so a captured call would replay as nothing (stale outputs) and the capture
        would be invalidated by the event wait. Refuse before anything is queued. device:
        the tensors' (a torch.device), whose current stream the op is ordered on - not
        necessarily the current device's (is_current_stream_capturing looks at that one
        only: a capture on cuda:1's stream while cuda:0 is current went unseen, and the op's
        ready word was captured instead of written, holding dashd's stream for every
        client); None: the current device."""
        if device is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                capturing = torch.cuda.is_current_stream_capturing()
        else:
            capturing = torch.cuda.is_current_stream_capturing()
        if capturing:
            raise RuntimeError(
                "dash_attn: cannot be called during CUDA graph capture (torch.cuda.graph, "
                "CUDA-graph trees): dashd computes in another process, which a graph cannot "
                "record or replay. Call it outside the captured region; torch.compile's "
                "mode='reduce-overhead' leaves dash_attn's ops out of its graphs where the "
                "PyTorch version supports the cudagraph_unsafe tag (docs/python.md)")

    def _forward_cuda(self, q, k, v, attn):
        """out, lse of (batch, seqlen, heads, d) tensors, or of a packed batch's (total,
        heads, d) ones (attn then carries its offsets by value: _varlen.py)."""
        self._refuse_capture(q.device)
        q, k, v = (self._last_dim_contiguous(x) for x in (q, k, v))
        nd = q.dim()
        if nd == 3:  # packed: lse (heads_q, total_q)
            lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
        else:
            b, s, h, _ = q.shape
            lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        res = _lib.DashResult()
        with _on_device(q.device), self._lock:
            self._tag()
            ts = self._cuda_tensors([(q, nd), (k, nd), (v, nd), (out, nd), (lse, nd - 1)])
            stream = _current_stream(q.device)
            self._check(_lib.dash_forward_stream(self._c, ctypes.byref(attn),
                                                 *[ctypes.byref(ts[i]) for i in range(5)],
                                                 ctypes.c_void_p(stream), ctypes.byref(res)))
            self._record(res, False)
        return out, lse

    def _backward_cuda(self, dout, q, k, v, out, lse, attn):
        self._refuse_capture(q.device)
        # dashd needs the last stride 1 in every tensor, as the forward made q, k, v
        q, k, v, out, dout = (self._last_dim_contiguous(x) for x in (q, k, v, out, dout))
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        dk = torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty_like(v, memory_format=torch.contiguous_format)
        res = _lib.DashResult()
        with _on_device(q.device), self._lock:
            self._tag()
            nd = q.dim()  # 3: a packed batch
            ts = self._cuda_tensors([(q, nd), (k, nd), (v, nd), (out, nd), (lse, nd - 1),
                                     (dout, nd), (dq, nd), (dk, nd), (dv, nd)])
            stream = _current_stream(q.device)
            self._check(_lib.dash_backward_stream(self._c, ctypes.byref(attn),
                                                  *[ctypes.byref(ts[i]) for i in range(9)],
                                                  ctypes.c_void_p(stream), ctypes.byref(res)))
            self._record(res, True)
        return dq, dk, dv

    # ---- CPU: through shared memory -------------------------------------------------------

    def _shm_reserve(self, need):
        # at least one byte: an op on empty tensors (a batch of 0) needs a buffer too, for
        # the request to name, and dashd's answer says which dimension is empty
        need = max(need, 1)
        if need <= self._shm_size:
            return
        size = 1 << max(20, (need - 1).bit_length())
        if self._shm is not None:
            _lib.dash_buffer_free(self._c, self._shm)
            self._shm = None
            self._shm_size = 0
        buf = ctypes.c_void_p()
        self._check(_lib.dash_shm_alloc(self._c, size, ctypes.byref(buf)))
        self._shm = buf
        self._shm_size = size

    def _copy_in(self, x, addr):
        """x's elements, dense in C order, into the shared buffer at addr: one copy, from
        whatever strides x has (a transposed, sliced or broadcast view is not made dense
        first: that was a second copy of every input, and a stride-0 view of a few values
        became all of its bytes in this process's memory as well as in the buffer)."""
        n = self._nbytes(x)
        if n == 0:
            return
        is_torch = _is_torch(x)
        if x.is_contiguous() if is_torch else x.flags.c_contiguous:
            ctypes.memmove(addr, self._addr(x), n)
            return
        dst = (ctypes.c_char * n).from_address(addr)
        if is_torch:
            torch.frombuffer(dst, dtype=x.dtype).view(x.shape).copy_(x.detach())
        else:
            np.copyto(np.ndarray(x.shape, x.dtype, buffer=dst), x, casting="no")

    @staticmethod
    def _nbytes(x):
        return x.numel() * x.element_size() if _is_torch(x) else x.nbytes

    @staticmethod
    def _addr(x):
        return x.data_ptr() if _is_torch(x) else x.ctypes.data

    @staticmethod
    def _empty_like(x, shape, float32=False):
        if _is_torch(x):
            return torch.empty(shape, dtype=torch.float32 if float32 else x.dtype)
        return np.empty(shape, dtype=np.float32 if float32 else x.dtype)

    def _host_op(self, ins, outs, backward, attn, offsets=()):
        """ins: host arrays q k v [out lse dout], any strides; outs: empty arrays to fill;
        offsets: a packed batch's (cu_seqlens_q, cu_seqlens_k) as contiguous int32 arrays,
        which go into the same buffer and into attn."""
        every = list(ins) + list(outs) + list(offsets)
        offs, at = [], 0
        for x in every:
            offs.append(at)
            at += (self._nbytes(x) + _ALIGN - 1) // _ALIGN * _ALIGN
        res = _lib.DashResult()
        with self._lock:
            self._tag()
            self._shm_reserve(at)
            base = _lib.dash_buffer_data(self._shm)
            for x, o in list(zip(ins, offs)) + list(zip(offsets, offs[len(ins) + len(outs):])):
                self._copy_in(x, base + o)
            if offsets:
                cu = offs[len(ins) + len(outs):]
                attn.cu_seqlens_q = _lib.DashTensor(self._shm.value, cu[0], 1)
                attn.cu_seqlens_q.shape[0] = offsets[0].shape[0]
                attn.cu_seqlens_k = _lib.DashTensor(self._shm.value, cu[1], 1)
                attn.cu_seqlens_k.shape[0] = offsets[1].shape[0]
                every = every[:len(every) - len(offsets)]
            ts = []
            for x, o in zip(every, offs):
                d = _lib.DashTensor(self._shm.value, o, x.ndim)
                for i in range(x.ndim):
                    d.shape[i] = x.shape[i]
                    d.strides[i] = 0  # dense
                ts.append(d)
            if backward:
                # q k v out lse dout | dq dk dv: the C order is q k v out lse dout dq dk dv
                rc = _lib.dash_backward(self._c, ctypes.byref(attn),
                                        *[ctypes.byref(x) for x in ts], ctypes.byref(res))
            else:
                rc = _lib.dash_forward(self._c, ctypes.byref(attn),
                                       *[ctypes.byref(x) for x in ts], ctypes.byref(res))
            if rc == -errno.ETIMEDOUT:
                # A daemon that was silent past the timeout may still run this op when it
                # wakes up and write its outputs into this buffer (dash.h): the next op gets
                # another one, so those late bytes cannot land in its inputs or outputs.
                msg = _lib.dash_last_error(self._c)
                _lib.dash_buffer_free(self._c, self._shm)
                self._shm = None
                self._shm_size = 0
                raise DashError(rc, msg.decode(errors="replace") if msg else "")
            self._check(rc)
            self._record(res, backward)
            for x, o in zip(outs, offs[len(ins):]):
                ctypes.memmove(self._addr(x), base + o, self._nbytes(x))
        return outs

    def _forward_host(self, q, k, v, attn):
        b, s, h, _ = q.shape
        out = self._empty_like(q, q.shape)
        lse = self._empty_like(q, (b, h, s), float32=True)
        return tuple(self._host_op([q, k, v], [out, lse], False, attn))

    def _backward_host(self, dout, q, k, v, out, lse, attn):
        ins = [q, k, v, out, lse, dout]
        dq = self._empty_like(ins[0], ins[0].shape)
        dk = self._empty_like(ins[1], ins[1].shape)
        dv = self._empty_like(ins[2], ins[2].shape)
        return tuple(self._host_op(ins, [dq, dk, dv], True, attn))

    # ---- the ops --------------------------------------------------------------------------

    def forward(self, q, k, v, causal=False, scale=None, schedule="auto", wave=0,
                window_size=None, softcap=None):
        """out, lse for q (batch, seqlen_q, heads_q, d), k, v (batch, seqlen_k, heads_kv,
        d); lse is float32 (batch, heads_q, seqlen_q). Tensors on a GPU stay there;
        host tensors (torch or numpy) go through shared memory. window_size: flash-attn's
        (left, right), -1 unbounded; softcap: 0 or None is off."""
        _check_inputs([("q", q), ("k", k), ("v", v)])
        return self._forward_checked(q, k, v, causal, scale, schedule, wave, window_size,
                                     softcap)

    def _forward_checked(self, q, k, v, causal, scale, schedule, wave, window_size, softcap):
        """forward() once _check_inputs has passed (the torch entry points check first)."""
        attn = self._attn(_dtype_code(q), causal, scale, schedule, wave, window_size, softcap)
        _refuse_cuda_f64(q)
        if _is_torch(q) and q.is_cuda:
            return self._forward_cuda(q, k, v, attn)
        return self._forward_host(q, k, v, attn)

    def backward(self, dout, q, k, v, out, lse, causal=False, scale=None, schedule="auto",
                 wave=0, window_size=None, softcap=None):
        """dq, dk, dv from the forward's out and lse and the output gradient dout."""
        _check_inputs([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)], lse)
        return self._backward_checked(dout, q, k, v, out, lse, causal, scale, schedule, wave,
                                      window_size, softcap)

    def _backward_checked(self, dout, q, k, v, out, lse, causal, scale, schedule, wave,
                          window_size, softcap):
        """backward() once its inputs are known good: _check_inputs passed, or (the eager
        autograd Function) q, k, v, out and lse are its forward's, checked then, and dout
        is what autograd checked against out (its shape, dtype and device)."""
        attn = self._attn(_dtype_code(q), causal, scale, schedule, wave, window_size, softcap)
        _refuse_cuda_f64(q)
        if _is_torch(q) and q.is_cuda:
            return self._backward_cuda(dout, q, k, v, out, lse, attn)
        return self._backward_host(dout, q, k, v, out, lse, attn)


def _current_stream(dev):
    """The raw cudaStream_t of dev's current stream: PyTorch's own accessor (what its
    extensions and Triton use; a fraction of torch.cuda.current_stream's cost), else the
    public API."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(dev.index)
    return torch.cuda.current_stream(dev).cuda_stream


def _on_device(dev):
    """torch.cuda.device(dev), or nothing when dev is already current (the usual case: the
    context manager switches the device twice, which a call should not pay for)."""
    if torch.cuda.current_device() == dev.index:
        return contextlib.nullcontext()
    return torch.cuda.device(dev)


INT32_MAX = 2**31 - 1
_NO_WINDOW = (-1, -1)


def bool_arg(name, x):
    """x as a bool, from a bool (Python's or numpy's), the integer 0 or 1, or a
    one-element tensor or array holding one of those. A string ("yes", "false"), None or
    another number is refused: Python's truth value would turn "false" into True, and
    flash-attn's compiled ops refuse strings there."""
    if isinstance(x, bool):
        return x
    if isinstance(x, numbers.Integral) and x in (0, 1):
        return bool(x)
    kind = type(x).__name__
    if type(x).__module__ == "numpy" and kind in ("bool", "bool_"):
        return bool(x)
    if (torch is not None and isinstance(x, torch.Tensor)) or \
            (np is not None and isinstance(x, np.ndarray)):
        if torch is not None and isinstance(x, torch.Tensor) and compiling():
            raise TypeError(f"dash_attn: {name} must be a Python bool under torch.compile, "
                            "not a tensor (a traced value cannot choose the mask)")
        if x.size == 1 if isinstance(x, np.ndarray) else x.numel() == 1:
            v = x.item()
            if isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)):
                return bool(v)
    # the type's name, not repr(x): under torch.compile x may be a traced value
    raise TypeError(f"dash_attn: {name} must be a bool, not a {kind}"
                    + (f" ({x!r})" if isinstance(x, (str, bytes, int, float, type(None))) else ""))


def schedule_code(schedule):
    """dash.h's enum dash_schedule of a schedule's name; ValueError naming the choices."""
    if schedule not in _lib.SCHEDULES:
        raise ValueError(f"dash_attn: unknown schedule {schedule!r}; one of "
                         + ", ".join(_lib.SCHEDULES))
    return _lib.SCHEDULES[schedule]


def float32_arg(name, x):
    """x (None: 0) as the float32 the request carries it in. A number that float32 holds
    only as 0 or infinity is refused: 0 means "the default" (softmax_scale: 1/sqrt(d)) or
    "off" (softcap) to dashd, so a softmax_scale of 1e-46 used to run with 1/sqrt(d), and
    dashd's word for 3e39 was "inf". Signs and NaN are the callers' and the daemon's to
    refuse."""
    if isinstance(x, (str, bytes)):  # float() would read "0.1"
        raise TypeError(f"dash_attn: {name} must be a number, not {x!r}")
    f = float(x or 0.0)
    f32 = ctypes.c_float(f).value
    if f != 0 and f32 == 0:
        raise ValueError(f"dash_attn: {name}={f!r} is 0 in float32, as dashd receives it "
                         "(0 would mean the default or off)")
    if math.isinf(f32) and not math.isinf(f):
        raise ValueError(f"dash_attn: {name}={f!r} is beyond float32, as dashd receives it")
    return f


def int32_arg(name, x):
    """x as an int that the request's int32 field holds unchanged: an integer (Python,
    numpy or a one-element torch tensor), or a float with no fraction, at most 2**31 - 1
    and at least -2**31. ctypes would keep the low 32 bits of anything larger (a window of
    2**32 + 3 became 3) and int() drops a fraction: both silently another value. Which
    values make sense (a window side >= -1, a max_seqlen >= 1) is the daemon's to say."""
    try:
        i = int(x)
        exact = i == x
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"dash_attn: {name} must be an integer, not {x!r}") from None
    if not exact:
        raise TypeError(f"dash_attn: {name} must be an integer, not {x!r}")
    if not -INT32_MAX - 1 <= i <= INT32_MAX:
        raise ValueError(f"dash_attn: {name}={i} is beyond int32 (at most {INT32_MAX}; "
                         "a window side of -1 is unbounded)")
    return i


def window_pair(window_size):
    """(left, right) ints from flash-attn's window_size (None: (-1, -1)); -1 is unbounded."""
    if window_size is None:
        return -1, -1
    if type(window_size) is tuple and window_size == _NO_WINDOW and type(window_size[0]) is int \
            and type(window_size[1]) is int:  # the usual call, fast (-1.0 and the like go below)
        return -1, -1
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise TypeError(f"dash_attn: window_size must be a pair (left, right), got "
                        f"{window_size!r}") from None
    return int32_arg("window_size[0]", left), int32_arg("window_size[1]", right)


def _refuse_cuda_f64(q):
    """float64 is the CPU engine's (dashd's GPU backend refuses it): say so at the call
    rather than from a stream-ordered op's later failure."""
    if _is_torch(q) and q.is_cuda and q.dtype == torch.float64:
        raise TypeError("dash_attn: float64 is served by dashd's CPU engine only, not on the "
                        "GPU: pass CPU tensors (to a dashd with --backend cpu), or float16, "
                        "bfloat16")


def _check_inputs(named, lse=None, devices=("cpu", "cuda")):
    """Refuse what the daemon cannot tell from a good call: named is [(name, tensor)] with
    q first; every tensor 4-D, of one kind (torch on the CPU, torch on one CUDA device, or
    numpy) and of q's dtype; lse (backward) float32 and 3-D. The request carries one dtype
    for all its tensors, so a mismatch would be read as q's dtype, not refused. The torch
    ops' fake implementations (_ops.py) check the same with "meta" among the devices."""
    every = named + ([("lse", lse)] if lse is not None else [])
    kinds, devs = set(), set()  # torch or not; the torch tensors' devices (one pass)
    for name, x in every:
        t = _is_torch(x)
        kinds.add(t)
        if t:
            d = x.device
            if d.type not in devices:
                raise ValueError(f"dash_attn: {name} is on device '{d}'; dashd serves "
                                 "tensors on the CPU or on a CUDA device")
            devs.add(d)
        elif np is None or not isinstance(x, np.ndarray):
            raise TypeError(f"dash_attn: {name} is a {type(x).__name__}; expected a torch "
                            "tensor or a numpy array")
    if len(kinds) != 1:
        raise TypeError("dash_attn: pass all torch tensors or all numpy arrays, not a mix")
    if len({d.type for d in devs}) > 1:
        raise ValueError("dash_attn: all tensors must be of one kind (all CUDA, or all host)")
    if len(devs) > 1 and next(iter(devs)).type == "cuda":
        raise ValueError("dash_attn: all tensors must be on one device")
    for name, x in named:
        if x.ndim != 4:
            raise ValueError(f"dash_attn: {name} must be 4-D (batch, seqlen, heads, head_dim); "
                             f"got shape {tuple(x.shape)}")
    want = named[0][1].dtype
    for name, x in named[1:]:
        if x.dtype != want:
            raise TypeError(f"dash_attn: {name} is {x.dtype} but q is {want}; all of q, k, v, "
                            "out and dout must have one dtype")
    if lse is not None:
        if lse.ndim != 3:
            raise ValueError("dash_attn: lse must be 3-D (batch, heads_q, seqlen_q); got shape "
                             f"{tuple(lse.shape)}")
        if str(lse.dtype).split(".")[-1] != "float32":
            raise TypeError(f"dash_attn: lse must be float32 (the forward's), not {lse.dtype}")


_default = None        # set by connect(): used for every device
_by_endpoint = {}      # the shared clients found by themselves, one per endpoint
_default_lock = threading.Lock()
_last_shared = None    # what default_client() returned last, for last_result()


def _endpoint_for(device):
    """The endpoint libdash picks for CUDA device `device` (an index of this process):
    $DASHD_ENDPOINT, a per-user daemon, or that GPU's dashd@N (/run/dashd/gpuN.sock)."""
    buf = ctypes.create_string_buffer(512)
    if _lib.dash_default_endpoint_cuda(int(device), buf, len(buf)) != 0:
        return None  # no CUDA in this libdash: the default endpoint
    return buf.value.decode()


def default_client(device=None):
    """The process's shared client, connected on first use (again after a fork): the one
    connect() made, else the daemon of CUDA device `device` (an int; None: the default
    endpoint), one client per endpoint."""
    global _default, _last_shared
    with _default_lock:
        if _default is not None and _default._pid != os.getpid():
            _default = None  # the parent's; a child must not use it (dash.h)
        if _default is not None:
            _last_shared = _default
            return _default
        ep = _endpoint_for(device) if device is not None else None
        c = _by_endpoint.get(ep)
        if c is not None and c._pid != os.getpid():
            c = None
        if c is None:
            c = _by_endpoint[ep] = Client(ep)
        _last_shared = c
        return c


def last_shared_client():
    """The shared client default_client() gave last (None: none yet in this process)."""
    c = _last_shared
    return c if c is not None and c._pid == os.getpid() else None


def synchronize_shared():
    """synchronize() every shared client of this process (one per GPU's daemon)."""
    with _default_lock:
        shared = [_default] if _default is not None else list(_by_endpoint.values())
    for c in shared:
        if c is not None and c._pid == os.getpid():
            c.synchronize()


def device_of(x):
    """The CUDA device index of a torch tensor on the GPU; None for anything else."""
    dev = getattr(x, "device", None)
    return dev.index if getattr(dev, "type", None) == "cuda" else None


def connect(endpoint=None, client_name=None, run_tag=None, timeout_ms=0, rank=None,
            world_size=None):
    """Replace the process's shared client with one made with these settings."""
    global _default
    c = Client(endpoint, client_name, run_tag, timeout_ms, rank, world_size)
    with _default_lock:
        old, _default = _default, c
    if old is not None and old._pid == os.getpid():
        old.close()
    return c
