# SPDX-License-Identifier: BSD-3-Clause
# On the GPU machine: a CUDA graph captured while dash_attn has stream-ordered ops whose
# replies are unread (libdash's watchdog thread polls then), and a capture around a
# dash_attn call (refused with a clear error). Prints one line per check.
import os, subprocess, sys, time, torch
root = os.getcwd()
sys.path.insert(0, os.path.join(root, "client/python"))
os.environ.setdefault("DASH_LIBRARY", os.path.join(root, ".gpu/lib/libdash.so"))
sock = "/tmp/capchk.sock"
d = subprocess.Popen([os.environ.get("DASHD", os.path.join(root, ".gpu/bin/dashd")), "--backend", "cuda", "--endpoint",
                      "ipc://" + sock, "--log-level", "warn"])
for _ in range(200):
    if os.path.exists(sock): break
    time.sleep(0.05)
import dash_attn
dash_attn.connect("ipc://" + sock)
q = torch.randn(1, 256, 4, 64, device="cuda", dtype=torch.bfloat16)
expect = dash_attn.flash_attn_func(q, q, q, causal=True)
torch.cuda.synchronize()
time.sleep(0.3)  # the watchdog ticks while the reply is unread
x = torch.ones(1024, device="cuda")
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        y = x * 2
    g.replay(); torch.cuda.synchronize()
    print("capture beside unread dash replies:", "ok" if bool((y == 2).all()) else "WRONG")
except Exception as e:
    print("capture beside unread dash replies: FAILED", repr(e)[:300])
g2 = torch.cuda.CUDAGraph()
raised = None
try:
    with torch.cuda.graph(g2):
        dash_attn.flash_attn_func(q, q, q, causal=True)
except Exception as e:
    raised = e
print("capture around dash_attn:", "refused clearly" if raised is not None and "CUDA graph capture" in str(raised) else "FAILED " + repr(raised)[:300])
torch.cuda.synchronize()
again = dash_attn.flash_attn_func(q, q, q, causal=True)
print("after the refusal:", "same bits" if torch.equal(again, expect) else "DIFFERENT")
dash_attn.synchronize()
d.terminate(); d.wait()
print("dashd exit", d.returncode)
