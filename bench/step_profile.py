# SPDX-License-Identifier: BSD-3-Clause
"""Where a training step's time goes (issue 20): examples/train_tiny_gpt.py's model, a few
steps under torch.profiler (CPU and CUDA activities), then from the trace: the step's wall
time, the caller's GPU busy time (its kernels and copies, merged), the GPU's idle gaps on
the caller's side and what came before and after the longest ones, and the host time of
the attention calls (dash_attn's _Eager / _EagerBackward ranges, or SDPA's ops).
dashd's own kernels run in its process and are not in the trace: with dash_attn the
caller's idle time includes them (about --expect-attn-ms a step, from the kernels' bench).

    python3 bench/step_profile.py --attn dash|sdpa|sdpa-strict [--endpoint E] [--trace F]
           [model options of train_tiny_gpt.py: --layers --dim --heads --seqlen --batch]
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import train_tiny_gpt as tg  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--attn", choices=["dash", "sdpa", "sdpa-strict"], default="dash")
ap.add_argument("--schedule", default="auto")
ap.add_argument("--endpoint", default=None)
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--dim", type=int, default=768)
ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--seqlen", type=int, default=1024)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--warm", type=int, default=5)
ap.add_argument("--steps", type=int, default=3, help="profiled steps")
ap.add_argument("--trace", default=None, help="write the chrome trace here (.json.gz)")
ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (no GPU rows)")
a = ap.parse_args()

torch.manual_seed(a.seed)
torch.use_deterministic_algorithms(True, warn_only=a.attn == "sdpa")
if a.attn == "sdpa-strict":
    torch.backends.cuda.enable_cudnn_sdp(False)
if a.attn == "dash":
    tg.dash_attn.connect(a.endpoint, client_name="step-profile")
dev = torch.device(a.device)
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
a.compile = False
model = tg.TinyGPT(a).to(device=dev, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)


def step(i):
    x, y = tg.batch(a, i, dev)
    logits = model(x, i)
    loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


walls = []
for i in range(a.warm):
    step(i)
for i in range(a.warm, a.warm + 5):  # unprofiled step times, for the profiler's overhead
    sync()
    t0 = time.perf_counter()
    step(i)
    walls.append((time.perf_counter() - t0) * 1e3)
from torch.profiler import profile, ProfilerActivity  # noqa: E402
sync()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    marks = []
    for i in range(a.steps):
        sync()
        t0 = time.perf_counter()
        step(100 + i)
        marks.append((time.perf_counter() - t0) * 1e3)
path = a.trace or f"/tmp/step-{a.attn}.json"
prof.export_chrome_trace(path.removesuffix(".gz"))
if path.endswith(".gz"):
    with open(path.removesuffix(".gz"), "rb") as f, gzip.open(path, "wb") as g:
        g.write(f.read())
    os.remove(path.removesuffix(".gz"))
    ev = json.load(gzip.open(path))
else:
    ev = json.load(open(path))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev

# the caller's GPU work: kernels, copies and sets (category names as torch's trace has them)
gpu = sorted((e["ts"], e["ts"] + e.get("dur", 0), e.get("name", "?")) for e in ev
             if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "python_function",
                                                                 "user_annotation")]
if dev.type == "cpu":  # the dry run: the aten ops stand in for the GPU's work
    gpu = sorted((e["ts"], e["ts"] + e.get("dur", 0), e.get("name", "?")) for e in ev
                 if e.get("ph") == "X" and e.get("cat") == "cpu_op")
if not gpu:
    sys.exit("no GPU activity in the trace")
t_first, t_last = gpu[0][0], max(g[1] for g in gpu)
busy, cur_s, cur_e = 0.0, gpu[0][0], gpu[0][1]
gaps = []  # (length us, before, after)
prev_name = gpu[0][2]
for s, e, n in gpu[1:]:
    if s > cur_e:
        busy += cur_e - cur_s
        gaps.append((s - cur_e, prev_name, n))
        cur_s, cur_e = s, e
    else:
        cur_e = max(cur_e, e)
    prev_name = n if e >= cur_e else prev_name
busy += cur_e - cur_s
span = t_last - t_first
gaps.sort(reverse=True)


def host(name_has):
    d = [e["dur"] for e in cpu if name_has(e.get("name", ""))]
    return (len(d), statistics.median(d) if d else 0.0, sum(d))


print(f"# step profile: --attn {a.attn}, {a.layers} layers, dim {a.dim}, {a.heads} heads, "
      f"seqlen {a.seqlen}, batch {a.batch}; {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu (dry run)'}; torch "
      f"{torch.__version__}; MPS env: {'yes' if os.environ.get('CUDA_MPS_PIPE_DIRECTORY') else 'no'}\n")
print(f"- step wall ms, unprofiled: {', '.join(f'{w:.2f}' for w in walls)} (median "
      f"{statistics.median(walls):.2f}); profiled: {', '.join(f'{w:.2f}' for w in marks)}")
print(f"- the caller's GPU work over {a.steps} profiled steps: span {span / 1e3:.2f} ms, busy "
      f"{busy / 1e3:.2f} ms ({100 * busy / span:.1f}%), {len(gpu)} kernels/copies; idle "
      f"{(span - busy) / 1e3:.2f} ms in {len(gaps)} gaps, of which >= 20 us: "
      f"{sum(g[0] for g in gaps if g[0] >= 20) / 1e3:.2f} ms in "
      f"{sum(1 for g in gaps if g[0] >= 20)}")
per = (span - busy) / a.steps / 1e3
print(f"- idle per step: {per:.2f} ms; busy per step {busy / a.steps / 1e3:.2f} ms")
for label, f in (("_Eager (dash_attn forward, host)", lambda n: n == "_Eager"),
                 ("_EagerBackward (dash_attn backward, host)", lambda n: n == "_EagerBackward"),
                 ("aten::_scaled_dot_product_flash_attention", lambda n: n == "aten::_scaled_dot_product_flash_attention"),
                 ("aten::_scaled_dot_product_flash_attention_backward", lambda n: n == "aten::_scaled_dot_product_flash_attention_backward"),
                 ("aten::_scaled_dot_product_cudnn_attention", lambda n: n == "aten::_scaled_dot_product_cudnn_attention"),
                 ("aten::_scaled_dot_product_cudnn_attention_backward", lambda n: n == "aten::_scaled_dot_product_cudnn_attention_backward"),
                 ("cudaLaunchKernel", lambda n: n == "cudaLaunchKernel"),
                 ("any cuda* runtime call", lambda n: n.startswith("cuda"))):
    n, med, tot = host(f)
    if n:
        print(f"- host: {label}: {n} calls, median {med:.0f} us, total {tot / 1e3:.2f} ms")
print("\n| longest idle gaps on the caller's GPU (us) | before | after |\n| ---: | --- | --- |")
for g, b, n in gaps[:15]:
    print(f"| {g:.0f} | {b[:60]} | {n[:60]} |")
print("\n| gap length (us) | gaps | total ms |\n| --- | ---: | ---: |")
for lo, hi in ((0, 5), (5, 20), (20, 100), (100, 500), (500, 1e12)):
    sel = [g[0] for g in gaps if lo <= g[0] < hi]
    print(f"| {lo}-{hi if hi < 1e12 else 'inf'} | {len(sel)} | {sum(sel) / 1e3:.2f} |")
print("\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18,
                                        max_name_column_width=60))
