# SPDX-License-Identifier: BSD-3-Clause
"""dash_attn.hf against a real dashd (CPU engine): transformers' Llama with
attn_implementation="dash" computes what its eager attention computes (outputs and
gradients against a float64 eager copy), trains twice to the same bits (losses, weights,
audit digests) and close to the eager model's losses, and refuses what it cannot honour.
Skipped, with the reason, when transformers is not installed."""
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="Hugging Face transformers is not installed (pip install "
    "transformers): the attn_implementation='dash' tests need it")

from conftest import ROOT, Daemon, dashctl_path  # noqa: E402

import dash_attn  # noqa: E402
import dash_attn.hf  # noqa: E402,F401

EXAMPLE = os.path.join(ROOT, "examples", "train_tiny_llama_hf.py")
SEED = int(os.environ.get("DASH_TEST_SEED", "0")) ^ 0x11A
# DASH_TEST_BACKEND=cuda (a GPU machine, dashd --backend cuda): the example trains on the
# GPU in bf16 at head dim 64; the in-process tests use fp32 CPU tensors, which only the
# CPU engine serves
CUDA = os.environ.get("DASH_TEST_BACKEND") == "cuda"
cpu_only = pytest.mark.skipif(CUDA, reason="fp32 CPU tensors: the CUDA backend serves bf16/fp16")


def tiny_config(**kw):
    # head_dim 32 (the CPU engine serves 32..256); 4 query heads over 2 kv heads: GQA
    base = dict(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                attention_dropout=0.0)
    base.update(kw)
    return transformers.LlamaConfig(**base)


def build(config, attn, dtype=torch.float32, seed=SEED):
    # a copy: from_config keeps the config object and writes the attention implementation
    # into it, so a second model built from the same config would switch the first one's
    # attention too (a dash model and its eager reference would both run eager)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                          attn_implementation=attn, dtype=dtype)
    assert model.config._attn_implementation == attn
    return model


def test_registered_with_transformers():
    from transformers import AttentionInterface
    assert AttentionInterface()["dash"] is dash_attn.hf.attention_forward
    model = build(tiny_config(), "dash")
    assert model.config._attn_implementation == "dash"


@cpu_only
def test_llama_outputs_and_gradients_match_float64_eager(client):
    """The same weights and tokens through dashd (fp32) and through transformers' eager
    attention in float64: logits and every parameter's gradient agree to fp32 accuracy."""
    config = tiny_config()
    dash = build(config, "dash")
    ref = build(config, "eager", dtype=torch.float64)
    ref.load_state_dict({k: v.double() for k, v in dash.state_dict().items()})
    g = torch.Generator().manual_seed(SEED)
    tokens = torch.randint(0, config.vocab_size, (2, 48), generator=g)
    out = dash(input_ids=tokens, labels=tokens)
    want = ref(input_ids=tokens, labels=tokens)
    assert torch.isfinite(out.logits).all()
    torch.testing.assert_close(out.logits.double(), want.logits, rtol=1e-4, atol=1e-4)
    out.loss.backward()
    want.loss.backward()
    for (name, p), (_, q) in zip(dash.named_parameters(), ref.named_parameters()):
        assert p.grad is not None, name
        scale = q.grad.abs().max().item() + 1e-12
        err = (p.grad.double() - q.grad).abs().max().item() / scale
        assert err < 1e-4, f"{name}: gradient off by {err:.2e} of its largest element"


@cpu_only
def test_explicit_causal_mask_gives_the_bits_of_no_mask(client):
    """A boolean causal mask, an additive one (0 / -inf) and an all-ones padding mask all
    describe causal attention: the same bits as no mask."""
    model = build(tiny_config(), "dash")
    attn = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(SEED ^ 1)
    q = torch.randn(2, 4, 40, 32, generator=g)
    k, v = (torch.randn(2, 2, 40, 32, generator=g) for _ in range(2))
    plain, _ = dash_attn.hf.attention_forward(attn, q, k, v, None, scaling=32 ** -0.5)
    causal = torch.ones(40, 40, dtype=torch.bool).tril().expand(2, 1, 40, 40)
    additive = torch.zeros(2, 1, 40, 40).masked_fill(~causal, float("-inf"))
    for mask in (causal, additive):
        got, weights = dash_attn.hf.attention_forward(attn, q, k, v, mask, scaling=32 ** -0.5)
        assert weights is None
        assert got.shape == (2, 40, 4, 32)
        assert torch.equal(got, plain)
    tokens = torch.randint(0, 64, (2, 40), generator=g)
    a = model(input_ids=tokens).logits
    b = model(input_ids=tokens, attention_mask=torch.ones(2, 40, dtype=torch.long)).logits
    assert torch.equal(a, b)


@cpu_only
def test_padding_mask_is_refused(client):
    model = build(tiny_config(), "dash")
    tokens = torch.randint(0, 64, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0  # left padding on the second sequence
    with pytest.raises(NotImplementedError, match="attention mask other than plain causal"):
        model(input_ids=tokens, attention_mask=mask)


@cpu_only
def test_dropout_in_training_is_refused(client):
    model = build(tiny_config(attention_dropout=0.1), "dash")
    tokens = torch.randint(0, 64, (1, 16))
    model.train()
    with pytest.raises(NotImplementedError, match="dropout=0.1.*attention_dropout"):
        model(input_ids=tokens)
    model.eval()  # transformers passes dropout 0 outside training: served
    assert torch.isfinite(model(input_ids=tokens).logits).all()


@cpu_only
def test_gemma2_sliding_window_and_softcap_match_float64_eager(client, monkeypatch):
    """Gemma 2 alternates sliding-window and full layers and soft-caps its attention
    logits: in float64 (the CPU engine serves windows and softcap) its logits and every
    gradient through dashd agree with transformers' eager attention to float64 accuracy,
    at a length past the window (so the sliding layers' masks are bands). Gemma 2's eager
    attention takes its softmax in float32 whatever the model's dtype, so the two agree to
    about 1e-7, not to float64's last bits."""
    config = transformers.Gemma2Config(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
        sliding_window=8, attn_logit_softcapping=5.0, query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"], attention_dropout=0.0)
    dash = build(config, "dash", dtype=torch.float64)
    ref = build(config, "eager", dtype=torch.float64)
    ref.load_state_dict(dash.state_dict())
    g = torch.Generator().manual_seed(SEED ^ 2)
    tokens = torch.randint(0, config.vocab_size, (2, 40), generator=g)
    seen, real = [], dash_attn.hf.flash_attn_func

    def spy(*a, **kw):  # which window and cap each layer's call to dashd carried
        seen.append((kw["window_size"], kw["softcap"]))
        return real(*a, **kw)

    monkeypatch.setattr(dash_attn.hf, "flash_attn_func", spy)
    out = dash(input_ids=tokens, labels=tokens)
    assert seen == [((7, 7), 5.0), ((-1, -1), 5.0)]
    want = ref(input_ids=tokens, labels=tokens)
    torch.testing.assert_close(out.logits, want.logits, rtol=1e-6, atol=1e-6)
    out.loss.backward()
    want.loss.backward()
    for (name, p), (_, q) in zip(dash.named_parameters(), ref.named_parameters()):
        assert p.grad is not None, name
        scale = q.grad.abs().max().item() + 1e-300
        err = (p.grad - q.grad).abs().max().item() / scale
        assert err < 1e-6, f"{name}: gradient off by {err:.2e} of its largest element"
    # and the window and the cap are not no-ops: without them the logits move
    plain = build(transformers.Gemma2Config(**{**config.to_dict(), "sliding_window": 4096,
                                               "attn_logit_softcapping": None}),
                  "dash", dtype=torch.float64)
    plain.load_state_dict(dash.state_dict())
    assert (plain(input_ids=tokens).logits - want.logits).abs().max().item() > 1e-3


def test_gemma2_window_softcap_and_padding_free_in_bf16(client):
    """bf16 at head dim 64, what the CUDA backend serves (on the GPU with
    DASH_TEST_BACKEND=cuda, else on the CPU engine): a tiny Gemma 2 with a sliding window
    and a softcap near transformers' eager attention in float32, and a padding-free batch
    of three sequences near each sequence run alone - its sliding layers get the whole
    row's windowed mask from transformers beside the offsets, which the offsets override."""
    dev = "cuda" if CUDA else "cpu"
    config = transformers.Gemma2Config(
        vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=128,
        sliding_window=16, attn_logit_softcapping=20.0, query_pre_attn_scalar=64,
        layer_types=["sliding_attention", "full_attention"], attention_dropout=0.0)
    dash = build(config, "dash", dtype=torch.bfloat16).to(dev)
    ref = build(config, "eager", dtype=torch.float32).to(dev)
    ref.load_state_dict({k: v.float() for k, v in dash.state_dict().items()})
    dash.requires_grad_(False), ref.requires_grad_(False)  # values only
    g = torch.Generator().manual_seed(SEED ^ 6)
    tokens = torch.randint(0, 64, (2, 80), generator=g).to(dev)
    got, want = dash(input_ids=tokens).logits.float(), ref(input_ids=tokens).logits
    assert float((got - want).norm() / want.norm()) < 2e-2
    lens = [17, 40, 23]
    seqs = [torch.randint(0, 64, (n,), generator=g).to(dev) for n in lens]
    cu = torch.tensor([0, 17, 57, 80], dtype=torch.int32, device=dev)
    pos = torch.cat([torch.arange(n) for n in lens]).to(dev)
    packed = dash(input_ids=torch.cat(seqs)[None], position_ids=pos[None], cu_seq_lens_q=cu,
                  cu_seq_lens_k=cu, max_length_q=40, max_length_k=40).logits.float()
    for a, sq in zip((0, 17, 57), seqs):
        alone = dash(input_ids=sq[None]).logits.float()[0]
        part = packed[0, a:a + len(sq)]
        assert float((part - alone).norm() / alone.norm()) < 2e-2


@cpu_only
def test_sliding_window_mask_must_match_the_window(client):
    """A band mask of the call's window is served (the bits of no mask); a band of another
    width is refused, and so is a window that is not a positive number of keys."""
    model = build(tiny_config(), "dash")
    attn = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(SEED ^ 3)
    q = torch.randn(1, 4, 20, 32, generator=g)
    k, v = (torch.randn(1, 2, 20, 32, generator=g) for _ in range(2))
    i = torch.arange(20)
    band = lambda w: ((i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)).expand(1, 1, 20, 20)  # noqa: E731
    plain, _ = dash_attn.hf.attention_forward(attn, q, k, v, None, scaling=32 ** -0.5,
                                              sliding_window=6)
    got, _ = dash_attn.hf.attention_forward(attn, q, k, v, band(6), scaling=32 ** -0.5,
                                            sliding_window=6)
    assert torch.equal(got, plain)
    full, _ = dash_attn.hf.attention_forward(attn, q, k, v, None, scaling=32 ** -0.5)
    assert not torch.equal(full, plain)
    with pytest.raises(NotImplementedError, match="within a sliding window of 6"):
        dash_attn.hf.attention_forward(attn, q, k, v, band(5), scaling=32 ** -0.5,
                                       sliding_window=6)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="sliding_window"):
            dash_attn.hf.attention_forward(attn, q, k, v, None, sliding_window=bad)


@cpu_only
def test_padding_free_batch_matches_each_sequence_alone(client, monkeypatch):
    """transformers' padding-free batches (DataCollatorWithFlattening with flash-attn
    kwargs): three sequences packed into one row, position_ids restarting and
    cu_seq_lens_q/k given. Served by flash_attn_varlen_func (a spy sees every layer go
    there; a block-diagonal mask beside them is accepted: the next test); the logits
    and the gradients of the summed per-sequence losses match running each sequence
    alone."""
    model = build(tiny_config(), "dash")
    lens = [5, 11, 7]
    g = torch.Generator().manual_seed(SEED ^ 4)
    seqs = [torch.randint(0, 64, (n,), generator=g) for n in lens]
    cu = torch.tensor([0, 5, 16, 23], dtype=torch.int64)
    pos = torch.cat([torch.arange(n) for n in lens])
    seen, real = [], dash_attn.hf.flash_attn_varlen_func

    def spy(*a, **kw):
        seen.append(a[3].tolist())
        return real(*a, **kw)

    monkeypatch.setattr(dash_attn.hf, "flash_attn_varlen_func", spy)
    checked, real_is = [], dash_attn.hf._packed_mask_is
    monkeypatch.setattr(dash_attn.hf, "_packed_mask_is",
                        lambda m, *a: checked.append(real_is(m, *a)) or checked[-1])
    packed = model(input_ids=torch.cat(seqs)[None], position_ids=pos[None], cu_seq_lens_q=cu,
                   cu_seq_lens_k=cu, max_length_q=11, max_length_k=11).logits
    assert seen == [[0, 5, 16, 23]] * 2  # both layers
    assert all(checked)  # a mask transformers passes beside them (none, in this version) fits
    ce = torch.nn.functional.cross_entropy
    loss = sum(ce(packed[0, a:b - 1], s[1:], reduction="sum")
               for a, b, s in zip(cu[:-1].tolist(), cu[1:].tolist(), seqs))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    alone_loss = 0
    for a, s in zip(cu[:-1].tolist(), seqs):
        alone = model(input_ids=s[None]).logits
        torch.testing.assert_close(packed[0, a:a + len(s)], alone[0], rtol=1e-5, atol=1e-5)
        alone_loss = alone_loss + ce(alone[0, :-1], s[1:], reduction="sum")
    alone_loss.backward()
    for n, p in model.named_parameters():
        scale = p.grad.abs().max().item() + 1e-12
        err = (grads[n] - p.grad).abs().max().item() / scale
        assert err < 1e-4, f"{n}: packed gradient off by {err:.2e} of its largest element"


@cpu_only
def test_padding_free_offsets_are_copied_once_while_the_tensor_is_unchanged():
    # transformers passes one cu_seq_lens tensor to every layer; a CUDA one is copied to the
    # host once (each copy is a wait for the stream) and again only once it changed or is
    # another tensor. (Here on the CPU, every tensor taken for a device one.)
    import gc
    from dash_attn import hf
    calls = []

    def fake_copy(a, b):
        calls.append(1)
        ha = a.clone()
        return ha, (ha if b is a else b.clone())
    dev = lambda t: True  # noqa: E731
    cu = torch.tensor([0, 5, 9], dtype=torch.int32)
    first = hf._cached_host_offsets(cu, cu, fake_copy, dev)
    again = hf._cached_host_offsets(cu, cu, fake_copy, dev)
    assert len(calls) == 1 and again[0] is first[0] and again[1] is first[1]
    cu.add_(0)  # in place: another version
    hf._cached_host_offsets(cu, cu, fake_copy, dev)
    assert len(calls) == 2
    other = torch.tensor([0, 5, 9], dtype=torch.int32)  # the same values, another tensor
    got = hf._cached_host_offsets(other, cu, fake_copy, dev)
    assert len(calls) == 3 and torch.equal(got[0], other)
    n = len(hf._host_copies)
    del other, got
    gc.collect()
    assert len(hf._host_copies) == n - 1  # a freed tensor's copy goes with it


def test_padding_free_batch_refuses_what_it_cannot_honour(client):
    """Offsets that do not cover the packed row, a batch of more than one row, and a mask
    that is neither the sequences' block-diagonal one nor the row's plain causal one (here:
    padding) are refused in words; those two masks give the bits of no mask (the offsets
    decide, as in transformers' flash-attn path)."""
    model = build(tiny_config(), "dash")
    attn = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(SEED ^ 5)
    q = torch.randn(1, 4, 12, 32, generator=g)
    k, v = (torch.randn(1, 2, 12, 32, generator=g) for _ in range(2))
    cu = torch.tensor([0, 4, 12], dtype=torch.int32)
    out, _ = dash_attn.hf.attention_forward(attn, q, k, v, None, cu_seq_lens_q=cu,
                                            cu_seq_lens_k=cu)
    assert out.shape == (1, 12, 4, 32)
    with pytest.raises(ValueError, match="offsets from 0 rising to the packed length 12"):
        dash_attn.hf.attention_forward(attn, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 4, 10]))
    with pytest.raises(ValueError, match="packed into batch 1"):
        dash_attn.hf.attention_forward(attn, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1),
                                       v.expand(2, -1, -1, -1), None, cu_seq_lens_q=cu)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()[None, None]
    padded = causal.clone()
    padded[..., :2] = False  # the first two keys are padding
    with pytest.raises(NotImplementedError, match="block-diagonal"):
        dash_attn.hf.attention_forward(attn, q, k, v, padded, cu_seq_lens_q=cu)
    block = causal.clone()
    block[..., 4:, :4] = False  # the second sequence does not see the first
    for mask in (block, causal):
        got, _ = dash_attn.hf.attention_forward(attn, q, k, v, mask, cu_seq_lens_q=cu)
        assert torch.equal(got, out)


@cpu_only
@pytest.mark.parametrize("kwarg", ["s_aux", "sinks", "position_bias"])
def test_arguments_dashd_cannot_honour_are_refused_by_name(client, kwarg):
    model = build(tiny_config(), "dash")
    attn = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 8, 32)
    k = v = torch.randn(1, 2, 8, 32)
    with pytest.raises(NotImplementedError, match=kwarg):
        dash_attn.hf.attention_forward(attn, q, k, v, None, **{kwarg: torch.ones(1)})


def example_args(attn, tag, endpoint=None, out=None):
    args = ["--steps", "4", "--seqlen", "64", "--batch", "2", "--layers", "2", "--hidden",
            "256" if CUDA else "128", "--heads", "4", "--kv-heads", "2", "--vocab", "64",
            "--threads", "1", "--device", "cuda" if CUDA else "cpu", "--attn", attn,
            "--run-tag", tag, "--seed",
            str(SEED & 0xFFFF), "--quiet"]
    return args + (["--endpoint", endpoint] if endpoint else []) + (["--out", out] if out else [])


def test_tiny_llama_trains_twice_to_the_same_bits_and_near_eager():
    """examples/train_tiny_llama_hf.py as two processes at once on one audited dashd, both
    with attn_implementation="dash": losses, weights and every attention digest equal, bit
    for bit. The same training with "eager" (here, in-process) gives losses within fp32
    noise of dash's."""
    work = tempfile.mkdtemp(prefix="dash-py-hf-")
    log = os.path.join(work, "audit.log")
    d = Daemon(["--audit", log, "--audit-level", "all"])
    try:
        runs = {name: subprocess.Popen(
                    [sys.executable, EXAMPLE] + example_args(
                        "dash", name, d.endpoint, os.path.join(work, name + ".json")),
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for name in ("one", "two")}
        for name, p in runs.items():
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, f"{name}: {err[-2000:]}"
    finally:
        assert d.stop() == 0
    one, two = (json.load(open(os.path.join(work, n + ".json"))) for n in ("one", "two"))
    spec = importlib.util.spec_from_file_location("train_tiny_llama_hf", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    threads = torch.get_num_threads()
    try:
        eager = example.train(example.parser().parse_args(example_args("eager", "eager")))
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)
    assert one["losses_hex"] == two["losses_hex"]
    assert one["weights_sha256"] == two["weights_sha256"]
    assert len(one["losses"]) == 4 and one["losses"][-1] < one["losses"][0]
    tol = 2e-2 if CUDA else 1e-4  # bf16 on the GPU, fp32 on the CPU
    for got, want in zip(one["losses"], eager["losses"]):
        assert abs(got - want) <= tol * abs(want), (one["losses"], eager["losses"])
    # the audit log: 4 steps x 2 layers x (forward, backward) per run, digests equal
    diff = subprocess.run([dashctl_path(), "audit", "diff", "--run-a", "one", "--run-b", "two",
                           log, log], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert "identical: 16 records matched" in diff.stdout
    dump = subprocess.run([dashctl_path(), "audit", "dump", log], capture_output=True,
                          text=True, check=True).stdout
    for step in range(4):
        for layer in range(2):
            want = f"run=one step={step} label=layer{layer}.attn"
            assert sum(want in line for line in dump.splitlines()) == 2, want
    assert "run=eager" not in dump  # transformers' own attention never reached dashd
