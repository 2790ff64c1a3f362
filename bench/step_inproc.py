#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""step_inproc.py - issue 20's what-if: examples/train_tiny_gpt.py's training step with
dashd's kernels run in the trainer's own process and CUDA context (build/libdash_inproc.so,
bench/inproc.c) instead of through dashd, to measure what a design that launches the
kernels on the caller's stream could reach. The same deterministic kernels and schedule
(auto), so the same bits as through dashd: the check below compares the losses with a
dashd run's when one is given. Bench only; not a product path.

    python3 bench/step_inproc.py [--lib build/libdash_inproc.so] [--compare SUMMARY.json]
                                 [train_tiny_gpt.py's options]

Prints train_tiny_gpt.py's summary JSON with "attn": "inproc".
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import sys

import torch

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "examples"))
import train_tiny_gpt  # noqa: E402

_i32p = ctypes.POINTER(ctypes.c_int32)
_i64p = ctypes.POINTER(ctypes.c_int64)
_vp = ctypes.c_void_p


class Kernels:
    def __init__(self, path, device):
        self.lib = ctypes.CDLL(path)
        self.lib.inproc_new.argtypes = [ctypes.c_int, ctypes.POINTER(_vp)]
        self.lib.inproc_forward.argtypes = [_vp, _i32p, ctypes.c_int32, ctypes.c_int32, ctypes.c_float,
                                            _vp, _vp, _vp, _vp, _vp, _i64p, _vp]
        self.lib.inproc_backward.argtypes = [_vp, _i32p, ctypes.c_int32, ctypes.c_int32, ctypes.c_float,
                                             _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _i64p, _vp]
        self.h = _vp()
        rc = self.lib.inproc_new(device, ctypes.byref(self.h))
        if rc:
            raise RuntimeError(f"inproc_new: {rc}")

    @staticmethod
    def _args(q, k, tensors):
        shape = (ctypes.c_int32 * 6)(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3])
        strides = (ctypes.c_int64 * (4 * len(tensors)))(*[s for t in tensors for s in t.stride()])
        return shape, strides

    def forward(self, q, k, v, scale):
        b, s, h, _ = q.shape
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
        shape, strides = self._args(q, k, (q, k, v, out))
        rc = self.lib.inproc_forward(self.h, shape, q.dtype == torch.bfloat16, 1, scale, q.data_ptr(),
                                     k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), strides,
                                     torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError(f"inproc_forward: {rc}")
        return out, lse

    def backward(self, q, k, v, out, lse, dout, scale):
        dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
        shape, strides = self._args(q, k, (q, k, v, out, dout, dq, dk, dv))
        rc = self.lib.inproc_backward(self.h, shape, q.dtype == torch.bfloat16, 1, scale, q.data_ptr(),
                                      k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                                      dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), strides,
                                      torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError(f"inproc_backward: {rc}")
        return dq, dk, dv


KERNELS = None


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        scale = 1.0 / math.sqrt(q.shape[-1])
        out, lse = KERNELS.forward(q, k, v, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        return KERNELS.backward(q, k, v, out, lse, dout, ctx.scale)


def attention(self, x, step):
    b, s, d = x.shape
    q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(dim=2)
    return self.proj(Attention.apply(q, k, v).reshape(b, s, d))


def main():
    global KERNELS
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--lib", default=os.path.join(root, "build", "libdash_inproc.so"))
    ap.add_argument("--compare")
    ours, rest = ap.parse_known_args()
    KERNELS = Kernels(ours.lib, torch.cuda.current_device())
    train_tiny_gpt.Block.attention = attention
    # train_tiny_gpt's loop as it is, under PyTorch's strict deterministic mode as its dash
    # runs are ("sdpa-strict" only sets that mode; attention is the function above)
    out = os.path.join("/tmp", f"inproc-{os.getpid()}.json")
    sys.argv = [sys.argv[0], *rest, "--attn", "sdpa-strict", "--out", out]
    with contextlib.redirect_stdout(sys.stderr):  # its lines; this prints the one summary
        train_tiny_gpt.main()
    summary = json.load(open(out))
    os.unlink(out)
    summary["attn"] = "inproc"
    if ours.compare:
        other = json.load(open(ours.compare))
        summary["same_losses_as"] = {"file": ours.compare, "same": other["losses_hex"] == summary["losses_hex"]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
