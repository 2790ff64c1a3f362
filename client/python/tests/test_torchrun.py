# SPDX-License-Identifier: BSD-3-Clause
"""Distributed runs against a real dashd (CPU engine): the rank a process gives reaches
the audit log (from torchrun's RANK / WORLD_SIZE, DASH_RANK / DASH_WORLD_SIZE, or
connect()), bad values are refused, and examples/torchrun_ddp.py - 2 ranks, DDP over gloo,
CPU tensors, both ranks on one dashd - repeats to the same bits on every rank, while a run
perturbed on one rank is named by `dashctl audit diff` at that rank, step and layer. With
DASH_TEST_BACKEND=cuda the ranks' tensors are on the GPU (dashd --backend cuda), and on a
machine of 2 GPUs also a dashd per GPU with NCCL between the ranks."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from conftest import ROOT, Daemon, dashctl_path, free_port  # noqa: E402

import dash_attn  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torchrun_ddp.py")
# DASH_TEST_BACKEND=cuda (a GPU machine, dashd --backend cuda): the example's ranks put
# their tensors on the GPU (bf16), both on GPU 0 when there is one; else CPU tensors (fp32)
CUDA = os.environ.get("DASH_TEST_BACKEND") == "cuda"
cpu_only = pytest.mark.skipif(CUDA, reason="fp32 CPU tensors: the CUDA backend serves bf16/fp16")
GPUS = torch.cuda.device_count() if CUDA and torch.cuda.is_available() else 0
torch2 = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                            reason="torchrun of PyTorch 1.x (Debian 12's 1.13) fails to start its "
                            "workers (AttributeError in elastic's redirects); needs PyTorch 2")


def one_forward(endpoint, **kw):
    c = dash_attn.Client(endpoint, client_name="ranked", **kw)
    q = torch.randn(1, 32, 2, 32)
    dash_attn.flash_attn_func(q, q, q, causal=True, client=c)
    c.close()


def dump(log):
    return subprocess.run([dashctl_path(), "audit", "dump", log], capture_output=True,
                          text=True, check=True).stdout


@cpu_only
def test_rank_from_environment_or_arguments_reaches_the_audit_log(monkeypatch):
    log = os.path.join(tempfile.mkdtemp(prefix="dash-py-rank-"), "audit.log")
    d = Daemon(["--audit", log])
    try:
        for name in ("DASH_RANK", "DASH_WORLD_SIZE", "RANK", "WORLD_SIZE"):
            monkeypatch.delenv(name, raising=False)
        one_forward(d.endpoint)                                  # none
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "4")
        one_forward(d.endpoint)                                  # torchrun's
        monkeypatch.setenv("DASH_RANK", "2")
        monkeypatch.setenv("DASH_WORLD_SIZE", "3")
        one_forward(d.endpoint)                                  # DASH_* win
        one_forward(d.endpoint, rank=0, world_size=2)            # arguments win
        # dashctl stats --json lists a live session's rank
        c = dash_attn.Client(d.endpoint, client_name="ranked-stats", rank=1, world_size=4)
        stats = json.loads(subprocess.run(
            [dashctl_path(), "stats", "--json", "--endpoint", d.endpoint], capture_output=True,
            text=True, check=True).stdout)
        c.close()
        mine = [x for x in stats["clients"] if x["client_name"] == "ranked-stats"]
        assert [(x["rank"], x["world_size"]) for x in mine] == [(1, 4)]
        assert all("rank" not in x for x in stats["clients"] if x["client_name"] != "ranked-stats")
    finally:
        assert d.stop() == 0
    lines = [l for l in dump(log).splitlines() if " forward " in l]
    assert len(lines) == 4
    assert "rank=" not in lines[0]
    assert [l.split("rank=")[1].split()[0] for l in lines[1:]] == ["1/4", "2/3", "0/2"]


@pytest.mark.parametrize("env, kw, match", [
    ({"RANK": "0"}, {}, r"\$RANK is set but \$WORLD_SIZE is not"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, {}, r"rank 2 of world size 2 \(\$RANK, \$WORLD_SIZE\)"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, {}, r"\$RANK='x' is not an integer"),
    ({}, {"rank": 1}, "rank and world_size go together"),
    ({}, {"rank": -1, "world_size": 2}, "need 0 <= rank < world_size"),
])
def test_bad_rank_is_refused_before_connecting(monkeypatch, env, kw, match):
    for name in ("DASH_RANK", "DASH_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=match):
        dash_attn.Client("ipc:///nonexistent/dashd.sock", **kw)


def torchrun(work, name, *extra, per_gpu=False):
    """examples/torchrun_ddp.py on 2 ranks against audited dashds: one (gloo; CPU tensors,
    or both ranks on GPU 0 under DASH_TEST_BACKEND=cuda) whose log is WORK/NAME/audit/dashd.audit,
    or with per_gpu one per GPU (NCCL; rank r on GPU r talks to the dashd of --device r,
    through the example's --endpoint with {device}) logging to WORK/NAME/audit/gpu<r>.audit.
    Each rank's summary goes to WORK/NAME/out/."""
    audit = os.path.join(work, name, "audit")
    os.makedirs(audit)
    if per_gpu:
        ds = [Daemon(["--device", str(g), "--audit", os.path.join(audit, f"gpu{g}.audit"),
                      "--audit-level", "all"], sock=os.path.join(work, name, f"gpu{g}.sock"))
              for g in (0, 1)]
        extra = ("--backend", "nccl", "--endpoint",
                 "ipc://" + os.path.join(work, name, "gpu{device}.sock")) + extra
        env = dict(os.environ)
        env.pop("DASHD_ENDPOINT", None)
    else:
        ds = [Daemon(["--audit", os.path.join(audit, "dashd.audit"), "--audit-level", "all"])]
        env = dict(os.environ, DASHD_ENDPOINT=ds[0].endpoint)
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", DASH_RUN_TAG=name)
    for k in ("DASH_RANK", "DASH_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), EXAMPLE, "--steps", "3", "--quiet",
           "--device", "cuda" if CUDA else "cpu",
           "--out-dir", os.path.join(work, name, "out")] + list(extra)
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    finally:
        assert all(d.stop() == 0 for d in ds)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return [json.load(open(os.path.join(work, name, "out", f"rank{r}.json"))) for r in (0, 1)]


@torch2
@pytest.mark.skipif(GPUS < 2, reason="needs DASH_TEST_BACKEND=cuda and 2 GPUs")
def test_torchrun_a_dashd_per_gpu_serves_its_rank_and_repeats_bits():
    """2 GPUs: rank r on GPU r, each with a dashd of its own (--device r), NCCL between the
    ranks: two runs give the same bits on every rank, each daemon's log holds its rank's
    records only, and `dashctl audit diff` matches the runs rank by rank across the logs."""
    work = tempfile.mkdtemp(prefix="dash-py-torchrun-gpus-")
    one = torchrun(work, "one", per_gpu=True)
    two = torchrun(work, "two", per_gpu=True)
    for r in (0, 1):
        assert one[r]["device"] == f"cuda:{r}", one[r]
        assert one[r]["losses_hex"] == two[r]["losses_hex"], r
        assert one[r]["weights_sha256"] == two[r]["weights_sha256"], r
    assert one[0]["weights_sha256"] == one[1]["weights_sha256"]  # DDP
    a, b = (os.path.join(work, n, "audit") for n in ("one", "two"))
    for g in (0, 1):
        text = dump(os.path.join(a, f"gpu{g}.audit"))
        assert text.count(f"rank={g}/2 step=") == 12, text[-2000:]
        assert text.count(f"rank={1 - g}/2 step=") == 0, text[-2000:]
    same = subprocess.run([dashctl_path(), "audit", "diff", a, b], capture_output=True,
                          text=True)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "rank 0: identical, 12 records matched" in same.stdout, same.stdout
    assert "rank 1: identical, 12 records matched" in same.stdout, same.stdout


@torch2
def test_torchrun_two_ranks_repeat_bits_and_a_perturbed_rank_is_named():
    work = tempfile.mkdtemp(prefix="dash-py-torchrun-")
    one = torchrun(work, "one")
    two = torchrun(work, "two")
    bent = torchrun(work, "bent", "--perturb", "1:1:1")
    for r in (0, 1):
        assert one[r]["rank"] == r and one[r]["world_size"] == 2
        assert one[r]["losses_hex"] == two[r]["losses_hex"], r
        assert one[r]["weights_sha256"] == two[r]["weights_sha256"], r
    # DDP: both ranks end with the same weights, though they saw different data
    assert one[0]["weights_sha256"] == one[1]["weights_sha256"]
    assert one[0]["losses_hex"] != one[1]["losses_hex"]
    # the perturbation changed rank 1's loss from step 1 on, and everyone's weights
    assert bent[1]["losses_hex"][0] == one[1]["losses_hex"][0]
    assert bent[1]["losses_hex"][1] != one[1]["losses_hex"][1]
    assert bent[0]["weights_sha256"] != one[0]["weights_sha256"]

    a, b, c = (os.path.join(work, n, "audit") for n in ("one", "two", "bent"))
    same = subprocess.run([dashctl_path(), "audit", "diff", a, b], capture_output=True,
                          text=True)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "rank 0: identical, 12 records matched" in same.stdout
    assert "rank 1: identical, 12 records matched" in same.stdout
    diff = subprocess.run([dashctl_path(), "audit", "diff", a, c], capture_output=True,
                          text=True)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    # each step of a rank: forward layer0, forward layer1, backward layer1, backward layer0
    assert ('first divergence: rank 1, step 1, record 1 of the step (forward "layer1.attn")'
            in diff.stdout), diff.stdout
    assert "rank 0: first difference at step 2, record 0 of the step" in diff.stdout
    assert "inputs differ: q " in diff.stdout
    assert dump(os.path.join(a, "dashd.audit")).count("rank=1/2 step=") == 12
