# SPDX-License-Identifier: BSD-3-Clause
"""ctypes declarations of libdash (client/dash.h), and where to find the library.

The library is $DASH_LIBRARY when that is set (an error if it cannot be loaded); otherwise
it is looked for, in order: a libdash.so.0 shipped inside this
package (setup.py copies the one `make` built); the build/ directory of the source tree
this package sits in (running from a checkout); the system's (`make install`, ldconfig).
Every structure below mirrors dash.h field for field; a mismatch would be a silent memory
bug, so tests/test_lib.py checks the sizes against what the header implies.
"""
import ctypes
import ctypes.util
import os

DASH_F32, DASH_F16, DASH_BF16, DASH_F64 = 0, 1, 2, 3
DASH_MASK_FULL, DASH_MASK_CAUSAL = 0, 1
SCHEDULES = {"auto": 0, "atomic": 1, "ascending": 2, "descending": 3, "spt": 4, "shift": 5}
SCHEDULE_NAMES = {v: k for k, v in SCHEDULES.items()}

DASH_CONNECT_NO_SESSION = 1


class DashTensor(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("offset", ctypes.c_uint64),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class DashCudaRef(ctypes.Structure):
    _fields_ = [
        ("ptr", ctypes.c_void_p),
        ("ndim", ctypes.c_int32),
        ("elem_size", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class DashAttn(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("mask", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("schedule", ctypes.c_int),
        ("wave", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("block_n", ctypes.c_int32),
        ("window", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("cu_seqlens_q", DashTensor),
        ("cu_seqlens_k", DashTensor),
        ("max_seqlen_q", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        ("batch_invariant", ctypes.c_int32),
        ("offsets_q", ctypes.POINTER(ctypes.c_int32)),
        ("offsets_k", ctypes.POINTER(ctypes.c_int32)),
        ("n_offsets", ctypes.c_int32),
    ]


class DashResult(ctypes.Structure):
    _fields_ = [
        ("schedule", ctypes.c_int),
        ("wave", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("block_n", ctypes.c_int32),
        ("queue_us", ctypes.c_uint64),
        ("run_us", ctypes.c_uint64),
        ("backend", ctypes.c_char * 16),
    ]


class DashConnectOpts(ctypes.Structure):
    _fields_ = [
        ("client_name", ctypes.c_char_p),
        ("run_tag", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("world_size", ctypes.c_uint),
        ("rank", ctypes.c_uint),
    ]


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libdash.so.0")
    # a checkout: client/python/dash_attn -> build/
    yield os.path.normpath(os.path.join(here, "..", "..", "..", "build", "libdash.so"))
    found = ctypes.util.find_library("dash")
    if found:
        yield found
    yield "libdash.so.0"


def _load():
    env = os.environ.get("DASH_LIBRARY")
    if env:  # an override: load that one or fail, never fall back to another build
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError(f"dash_attn: cannot load DASH_LIBRARY={env}: {e}") from None
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "dash_attn: cannot load libdash (build it with `make`, then `pip install "
        "./client/python`, or set DASH_LIBRARY to the path of libdash.so): " + "; ".join(errors))


lib, path = _load()

_c = ctypes.c_void_p
_pc = ctypes.POINTER(ctypes.c_void_p)
_pt = ctypes.POINTER(DashTensor)
_pa = ctypes.POINTER(DashAttn)
_pr = ctypes.POINTER(DashResult)


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


dash_connect = _fn("dash_connect", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(DashConnectOpts), _pc)
dash_connect_explain = _fn("dash_connect_explain", ctypes.c_int, ctypes.c_char_p,
                           ctypes.POINTER(DashConnectOpts), _pc, ctypes.c_char_p, ctypes.c_size_t)
dash_default_endpoint_cuda = _fn("dash_default_endpoint_cuda", ctypes.c_int, ctypes.c_int,
                                 ctypes.c_char_p, ctypes.c_size_t)
dash_endpoint_check = _fn("dash_endpoint_check", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                          ctypes.c_size_t)
dash_close = _fn("dash_close", None, _c)
dash_shm_alloc = _fn("dash_shm_alloc", ctypes.c_int, _c, ctypes.c_size_t, _pc)
dash_buffer_free = _fn("dash_buffer_free", ctypes.c_int, _c, _c)
dash_buffer_data = _fn("dash_buffer_data", ctypes.c_void_p, _c)
dash_buffer_size = _fn("dash_buffer_size", ctypes.c_size_t, _c)
dash_cuda_view = _fn("dash_cuda_view", ctypes.c_int, _c, ctypes.c_void_p, ctypes.c_size_t, _pc,
                     ctypes.POINTER(ctypes.c_uint64))
dash_cuda_tensors = _fn("dash_cuda_tensors", ctypes.c_int, _c, ctypes.c_int32,
                        ctypes.POINTER(DashCudaRef), _pt)
dash_forward = _fn("dash_forward", ctypes.c_int, _c, _pa, _pt, _pt, _pt, _pt, _pt, _pr)
dash_backward = _fn("dash_backward", ctypes.c_int, _c, _pa, _pt, _pt, _pt, _pt, _pt, _pt, _pt,
                    _pt, _pt, _pr)
dash_forward_stream = _fn("dash_forward_stream", ctypes.c_int, _c, _pa, _pt, _pt, _pt, _pt, _pt,
                          ctypes.c_void_p, _pr)
dash_backward_stream = _fn("dash_backward_stream", ctypes.c_int, _c, _pa, _pt, _pt, _pt, _pt,
                           _pt, _pt, _pt, _pt, _pt, ctypes.c_void_p, _pr)
dash_set_audit = _fn("dash_set_audit", ctypes.c_int, _c, ctypes.c_int64, ctypes.c_char_p)
dash_last_error = _fn("dash_last_error", ctypes.c_char_p, _c)
dash_strerror = _fn("dash_strerror", ctypes.c_char_p, ctypes.c_int)
dash_errname = _fn("dash_errname", ctypes.c_char_p, ctypes.c_int)
dash_sync = _fn("dash_sync", ctypes.c_int, _c)
dash_ping = _fn("dash_ping", ctypes.c_int, _c, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))
