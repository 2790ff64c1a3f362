#!/usr/bin/env python3
"""Generate host-compilable copies of digest version 3's device code (the __CUDA_ARCH__
paths) with the inline PTX replaced by C shims. Every patch must match exactly once."""
import os, re, sys
src, out = sys.argv[1], sys.argv[2]

def read(p):
    return open(os.path.join(src, p)).read()

def sub1(text, pat, rep, flags=0):
    new, n = re.subn(pat, rep, text, flags=flags)
    assert n == 1, (pat, n)
    return new

def write(p, text):
    d = os.path.join(out, os.path.dirname(p))
    os.makedirs(d, exist_ok=True)
    open(os.path.join(out, p), 'w').write(text)

# xxh3.h: mul.wide.u32 -> emu_mul_wide_u32
x3 = read('kernels/digest/xxh3.h')
x3 = sub1(x3, r'asm\("mul\.wide\.u32 %0, %1, %2;" : "=l"\(r\) : "r"\(a\), "r"\(b\)\);',
          'r = emu_mul_wide_u32(a, b);')
write('kernels/digest/xxh3.h', x3)
write('kernels/digest/xxh64.h', read('kernels/digest/xxh64.h'))
write('kernels/digest/digest_leaf.cuh', read('kernels/digest/digest_leaf.cuh'))

def extract(text, start, what):
    """From the line starting with `start` to the end of the first balanced {...} after it."""
    i = text.index(start)
    j = text.index('{', i)
    depth = 0
    for k in range(j, len(text)):
        if text[k] == '{':
            depth += 1
        elif text[k] == '}':
            depth -= 1
            if depth == 0:
                return text[i:k + 1] + '\n'
    raise SystemExit('unbalanced ' + what)

dc = read('kernels/digest/digest_cuda.cu')
parts = []
for line in dc.splitlines():
    if line.startswith('#define LEAF_'):
        parts.append(line)
parts.append(extract(dc, 'static __device__ __forceinline__ ulonglong2 chunk_words', 'chunk_words'))
parts.append(extract(dc, 'static __device__ __forceinline__ uint4 leaf_load', 'leaf_load'))
parts.append(extract(dc, 'template <int SLICES>\nstatic __device__ uint64_t leaf_warp', 'leaf_warp'))
write('emu_digest_cuda.h', '\n'.join(parts))

wg = read('kernels/cuda/bwd_wgmma.cuh')
tl = extract(wg, 'template <int D, int BN, typename TILE>\nstatic __device__ __forceinline__ void bwd_wg_tile_leaves',
             'bwd_wg_tile_leaves')
tl = sub1(tl, r'asm volatile\("ld\.shared\.v2\.u64 \{%0, %1\}, \[%2\];"\s*:\s*"=l"\(w\.x\), "=l"\(w\.y\)\s*:\s*"r"\((.*?)\)\);',
          r'emu_ld_shared_v2_u64(w.x, w.y, \1);', re.S)
regs = extract(wg, 'template <int D>\nstruct bwd_wg_regs', 'bwd_wg_regs') + ';\n'
ci = read('kernels/cuda/attn_cuda_int.h')
sw = extract(ci, 'static __device__ __forceinline__ uint32_t attn_sw128', 'attn_sw128')
write('emu_bwd.h', sw + regs + tl)
print('generated in', out)
