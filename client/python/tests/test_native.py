# SPDX-License-Identifier: BSD-3-Clause
"""The native op (client/torch/dash_torch.h, dash_attn/_native.py) where no GPU is needed:
that `make test` builds it for the venv's torch and the binding loads it, the client lock
it shares with Python, its refusals as DashError. Its results on CUDA tensors - values,
gradients, bits against the ctypes path - are test_gpu.py's."""
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import dash_attn
from dash_attn import _lib, _native

from conftest import HERE

NAME = f"libdash_torch_{torch.__version__}.so"
BUILT = os.path.exists(os.path.join(os.path.dirname(os.path.abspath(_lib.path)), NAME))
needs_native = pytest.mark.skipif(not BUILT, reason=f"{NAME} not built (torch without CUDA?)")


def test_the_native_op_loads_when_built_for_this_torch(client):
    assert client._native == BUILT, _native.why_not
    if BUILT:
        assert isinstance(client._lock, _native.Lock)
        assert hasattr(torch.ops.dash_torch, "attn")


def _call(c, q):
    return _native.attention(c, q, q, q, None, False, -1, -1, 0.0, "auto")


@needs_native
def test_the_native_op_refuses_cpu_tensors_as_a_dash_error(client):
    q = torch.randn(1, 8, 2, 64)
    with pytest.raises(dash_attn.DashError) as e:
        _call(client, q)
    assert e.value.name == "DASH_EINVAL" and "4-D CUDA tensors" in str(e.value), str(e.value)


@needs_native
def test_the_custom_ops_native_requests_refuse_cpu_tensors_as_a_dash_error(client):
    # dash_attn::fwd / bwd run the native op's requests on CUDA tensors (no autograd node);
    # called with others they refuse in dash_attn's words, as the eager node does
    assert hasattr(torch.ops.dash_torch, "fwd") and hasattr(torch.ops.dash_torch, "bwd")
    q = torch.randn(1, 8, 2, 64)
    lse = torch.zeros(1, 2, 8)
    for call in (lambda: _native.forward(client, q, q, q, None, True, -1, -1, 0.0, "auto",
                                         None, None),
                 lambda: _native.backward(client, q, q, q, q, q, lse, None, True, -1, -1, 0.0,
                                          "auto", 3, "x")):
        with pytest.raises(dash_attn.DashError) as e:
            call()
        assert e.value.name == "DASH_EINVAL" and "4-D CUDA tensors" in str(e.value), str(e.value)
    with pytest.raises((ValueError, OverflowError), match="window_size"):  # int32, as Client._attn
        _native.forward(client, q, q, q, None, True, 2**40, 0, 0.0, "auto", None, None)


@needs_native
def test_the_native_varlen_op_refuses_cpu_tensors_as_a_dash_error(client):
    # a packed batch's op (attn_varlen) takes 3-D CUDA tensors; the binding sends CPU ones
    # through its ctypes path (varlen_ok), and the op itself refuses them in its words
    assert hasattr(torch.ops.dash_torch, "attn_varlen") and _native._varlen_op is not None
    q = torch.randn(10, 2, 64)
    cu = torch.tensor([0, 3, 10], dtype=torch.int32)
    assert not _native.varlen_ok(client, q)
    with pytest.raises(dash_attn.DashError) as e:
        _native.varlen_attention(client, q, q, q, cu, cu, 7, 7, None, True, (-1, -1), 0.0,
                                 "auto", False)
    assert e.value.name == "DASH_EINVAL" and "3-D CUDA tensors" in str(e.value), str(e.value)
    # the binding's checks come first, as on the ctypes path (DashVarlenFunction's)
    with pytest.raises(ValueError, match="both are batch \\+ 1"):
        _native.varlen_attention(client, q, q, q, cu, cu[:2], 7, 7, None, True, (-1, -1),
                                 0.0, "auto", False)
    with pytest.raises(TypeError, match="int32"):
        _native.varlen_attention(client, q, q, q, cu.float(), cu, 7, 7, None, True, (-1, -1),
                                 0.0, "auto", False)


def test_a_cpu_packed_batch_keeps_the_ctypes_path(client, monkeypatch):
    # flash_attn_varlen_func on CPU tensors never reaches the native op
    taken = []
    monkeypatch.setattr(_native, "varlen_attention", lambda *a: taken.append(a))
    q, k, v = (torch.randn(10, 2, 32, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, 3, 10], dtype=torch.int32)
    out = dash_attn.flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True)
    out.sum().backward()
    assert not taken and out.grad_fn.name() == "DashVarlenFunctionBackward"
    assert q.grad is not None and torch.isfinite(q.grad).all()


@needs_native
def test_the_native_op_refuses_a_closed_client_and_an_unknown_one(daemon):
    c = dash_attn.Client(daemon.endpoint, client_name="pytest-native-closed")
    c.close()
    with pytest.raises(dash_attn.DashError) as e:
        _call(c, torch.randn(1, 8, 2, 64))
    assert "closed" in str(e.value), str(e.value)

    class Unknown:
        id = 10**12
    with pytest.raises(dash_attn.DashError) as e:
        _call(Unknown, torch.randn(1, 8, 2, 64))
    assert "no such client" in str(e.value), str(e.value)


@needs_native
def test_a_collected_client_leaves_the_native_ops_map(daemon):
    # each Client makes an entry in the library's map; a collected one's entry goes, so a
    # process that opens clients for ever does not grow it for ever
    import gc
    gc.collect()
    before = _native._so.dash_torch_entries()
    kept = dash_attn.Client(daemon.endpoint, client_name="pytest-native-kept")
    ids = []
    for _ in range(20):
        c = dash_attn.Client(daemon.endpoint, client_name="pytest-native-forget")
        ids.append(c.id)
        c.close()
        del c
    gc.collect()
    assert _native._so.dash_torch_entries() <= before + 1

    class Gone:
        id = ids[-1]
    with pytest.raises(dash_attn.DashError) as e:
        _call(Gone, torch.randn(1, 8, 2, 64))
    assert "no such client" in str(e.value), str(e.value)
    with pytest.raises(dash_attn.DashError) as e:  # the kept one is still known
        _call(kept, torch.randn(1, 8, 2, 64))
    assert "4-D CUDA tensors" in str(e.value), str(e.value)
    kept.close()


@needs_native
def test_a_client_held_by_one_thread_waits_for_it_in_another(daemon):
    # the lock the C++ backward takes on autograd's thread is the one Python's calls take
    c = dash_attn.Client(daemon.endpoint, client_name="pytest-native-lock")
    try:
        done = []
        t = threading.Thread(target=lambda: done.append(c.ping()))
        with c._lock:
            t.start()
            time.sleep(0.3)
            assert not done and t.is_alive(), "ping ran while another thread held the client"
        t.join(10)
        assert done and done[0] > 0
        c.ping()  # and the lock was given back
    finally:
        c.close()


def test_dash_native_0_keeps_every_call_on_the_ctypes_path(daemon):
    code = ("import sys, threading; sys.path.insert(0, %r); import dash_attn; "
            "from dash_attn import _native; c = dash_attn.Client(%r); "
            "assert not c._native and type(c._lock) is type(threading.Lock()); "
            "assert _native.why_not == 'DASH_NATIVE=0', _native.why_not; c.ping(); c.close()"
            % (os.path.join(HERE, ".."), daemon.endpoint))
    env = dict(os.environ, DASH_NATIVE="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_torch_op_library_that_cannot_load_is_an_error_when_named(daemon, tmp_path):
    bad = tmp_path / "libdash_torch_bad.so"
    bad.write_bytes(b"not a library")
    code = ("import sys; sys.path.insert(0, %r); import dash_attn; dash_attn.Client(%r)"
            % (os.path.join(HERE, ".."), daemon.endpoint))
    env = dict(os.environ, DASH_TORCH_LIBRARY=str(bad))
    env.pop("DASH_NATIVE", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "DASH_TORCH_LIBRARY" in r.stderr, r.stderr


@needs_native
def test_the_package_ships_the_native_op_beside_libdash(tmp_path):
    # `pip install ./client/python` after `make`: setup.py copies build/'s libdash and every
    # libdash_torch_*.so into the package, where _native.py looks beside the libdash it loads
    pytest.importorskip("setuptools")
    import zipfile
    import shutil
    src = tmp_path / "src"  # a copy: pip builds in the tree it is given
    shutil.copytree(os.path.join(HERE, ".."), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    env = dict(os.environ, DASH_LIBDASH=os.path.abspath(_lib.path))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "-w", str(tmp_path), str(src)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    whl, = [p for p in os.listdir(tmp_path) if p.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / whl).namelist()
    assert "dash_attn/libdash.so.0" in names and f"dash_attn/{NAME}" in names, names


@needs_native
def test_a_take_interrupted_after_it_returned_gives_the_lock_back(daemon):
    # Lock.__enter__ gives the lock back when an exception (a KeyboardInterrupt raised right
    # after the take returned) leaves it: dash_torch_unlock_if_mine releases only a lock
    # the calling thread took, so it is safe whether or not the take happened
    c = dash_attn.Client(daemon.endpoint, client_name="pytest-native-unlock")
    try:
        so = _native._so
        assert so.dash_torch_unlock_if_mine(c.id) == 0  # not held: nothing given back
        so.dash_torch_lock(c.id)
        other = []
        t = threading.Thread(target=lambda: other.append(so.dash_torch_unlock_if_mine(c.id)))
        t.start()
        t.join(10)
        assert other == [0], "another thread gave back a lock it did not take"
        assert so.dash_torch_unlock_if_mine(c.id) == 1
        c.ping()  # free again
    finally:
        c.close()


@needs_native
def test_a_forked_child_makes_and_uses_its_own_client(daemon):
    c = dash_attn.Client(daemon.endpoint, client_name="pytest-native-parent")
    try:
        with c._lock:  # held by the parent at the fork: the child never takes it
            pid = os.fork()
            if pid == 0:  # the child: a client of its own, its own lock
                code = 1
                try:
                    k = dash_attn.Client(daemon.endpoint, client_name="pytest-native-child")
                    k.ping()
                    k.close()
                    code = 0
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        c.ping()
    finally:
        c.close()
