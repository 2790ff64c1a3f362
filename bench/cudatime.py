# SPDX-License-Identifier: BSD-3-Clause
"""cudatime.py - how the GPU peers (sdpa_peers.py, cudnn_peers.py, varlen_peers.py) time a
call: `warm` calls first, then the median of `reps` calls, each between two CUDA events
(median_ms: a call alone, its launch latency included); or `reps` calls back to back between
two events, as a training step issues them with the host ahead of the GPU (streamed_ms)."""
import statistics


def median_ms(torch, fn, reps, warm):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def streamed_ms(torch, fn, reps, warm):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps
