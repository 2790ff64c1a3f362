#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_node_client.py - a trainer's first call on a GPU node (scripts/gpu_node_check.py runs
it as a user other than dashd's): flash_attn_func on CUDA tensors with no DASHD_ENDPOINT,
so libdash must find the daemon of the tensors' GPU (/run/dashd/gpuN.sock) by itself.
Checks the forward and the gradients against float64 on fresh random data, and that a
second run gives the same bits. Prints one line; exit status 0 when every check passed.
"""
import math
import os
import sys

import torch
from dash_attn.flash_attn_interface import flash_attn_func


def reference(q, k, v, dout, causal):
    qd, kd, vd = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    s = torch.einsum('bshd,bthd->bhst', qd, kd) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float('-inf'))
    o = torch.einsum('bhst,bthd->bshd', torch.softmax(s, dim=-1), vd)
    o.backward(dout.double().cpu())
    return o.detach(), qd.grad, kd.grad, vd.grad


def run(q, k, v, dout, causal):
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = flash_attn_func(qq, kk, vv, causal=causal)
    o.backward(dout)
    torch.cuda.synchronize()
    return o.detach(), qq.grad, kk.grad, vv.grad


def main():
    if 'DASHD_ENDPOINT' in os.environ:
        sys.exit('gpu_node_client: DASHD_ENDPOINT is set; this checks that libdash finds dashd alone')
    torch.manual_seed(int.from_bytes(os.urandom(4), 'little'))
    worst = 0.0
    for causal, (b, s, h, d) in ((True, (2, 384, 4, 64)), (False, (1, 200, 2, 128))):
        q, k, v, dout = (torch.randn(b, s, h, d, device='cuda', dtype=torch.bfloat16) for _ in range(4))
        got = run(q, k, v, dout, causal)
        again = run(q, k, v, dout, causal)
        ref = reference(q, k, v, dout, causal)
        for name, x, y, r in zip(('out', 'dq', 'dk', 'dv'), got, again, ref):
            if not torch.equal(x, y):
                sys.exit(f'gpu_node_client: FAIL {name} differs between two runs (causal={causal})')
            err = (x.double().cpu() - r).abs().max().item() / r.abs().max().item()
            worst = max(worst, err)
            if not err <= 2e-2:
                sys.exit(f'gpu_node_client: FAIL {name} off float64 by {err:.2e} of its largest element')
    print(f'gpu_node_client: ok as uid {os.getuid()}: forward and gradients within {worst:.1e} of '
          f'float64, the same bits twice ({torch.cuda.get_device_name()})')


if __name__ == '__main__':
    main()
