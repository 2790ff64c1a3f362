#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""ptxas_spills.py - the build check of issue 16's "0 spill bytes for every shipped kernel":
reads ptxas's report of every kernel the build compiled (the .cu.o.ptxas files the Makefile's
nvcc rule writes beside each object, one per translation unit and every architecture it
targets) and lists the kernels that spill registers to local memory.

    python3 scripts/ptxas_spills.py BUILD_OBJ_DIR [--list]

Exit 1 when a kernel spills that KNOWN below does not name (a regression: a kernel that was
spill-free now spills), when a kernel KNOWN names spills more bytes (stored or loaded) than
KNOWN allows it (a regression too: a trial once took the head-dim-64 kernel from 40/52 to
44/124 bytes unnoticed), or when a kernel KNOWN names no longer spills or is no longer built
(take it off: the list only shrinks, to empty, which is the target; it gained one entry, the head-dim-64 pair step, adopted for its speed with 40 bytes left). --list prints every
kernel's registers and spill bytes. Exit 2 when there are no reports (a build without nvcc
has none; the Makefile does not call this then).
"""
import glob
import os
import re
import subprocess
import sys

# (architecture, kernel as c++filt prints it): (bytes stored, bytes loaded) at most - the
# kernels that spill today, nvcc 13.0.
# Every forward, every persistent backward and every window/packed kernel spill nothing
# (v1's backward spilled 24 bytes at head dim 256 until its two modes became two kernels;
# v2 at head dim 128 spilled 12-36 with 64 x 128 tiles, which it no longer has; the
# window/packed v3 backward 4 until the softcap got an instance of its own; v3's
# interleaved backward at head dim 256 20 until its P/dS store addresses were formed in the
# step from a %tid.x read, bwd_wg_store_pds's fresh, and its restore's flag was set again
# after the restore). Left:
KNOWN = {
    # v3's persistent backward at head dim 64 with the pair step (BWD_WG_PAIR64, adopted
    # 2026-12-05 for +15-22%): 24 bytes (40 until the masked softmax compared constant
    # columns and the job's fields moved to shared memory, trial spill64-partial): values
    # formed at the kernel's or the unit's start, spilled there and reloaded at unit ends
    # and in the Q/dO cp.async fallback; none in the pair loop's TMA path (SASS).
    # bench/results/pair64-trial-2026-12-05.md says what was tried against them. The one
    # entry this list gained: the next to go. Loads 36 -> 24 bytes since digest version 3
    # (its unit-end leaves read back from the staging tiles one row a lane, no longer
    # hashed from the quads' registers).
    ("sm_90a", "void attn_bwd_tc_persistent_kernel<attn_f16, 64, 128, 3>(attn_bwd_params, bwd_wg_qmaps)"): (24, 24),
    ("sm_90a", "void attn_bwd_tc_persistent_kernel<attn_bf16, 64, 128, 3>(attn_bwd_params, bwd_wg_qmaps)"): (24, 24),
}

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
PROPS = re.compile(r"Function properties for (\S+)")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def parse(text):
    """{(arch, mangled): {"stores", "loads", "regs"}} of the entry functions in one report."""
    kernels, current, props = {}, None, None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            current = (m.group(2), m.group(1))
            kernels[current] = {"stores": 0, "loads": 0, "regs": None}
            props = None
            continue
        m = PROPS.search(line)
        if m:
            props = m.group(1)
            continue
        m = SPILL.search(line)
        if m and current and props == current[1]:
            kernels[current]["stores"], kernels[current]["loads"] = int(m.group(1)), int(m.group(2))
            continue
        m = REGS.search(line)
        if m and current and kernels[current]["regs"] is None:
            kernels[current]["regs"] = int(m.group(1))
    return kernels


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print("usage: python3 scripts/ptxas_spills.py BUILD_OBJ_DIR [--list]", file=sys.stderr)
        return 2
    reports = sorted(glob.glob(os.path.join(args[0], "**", "*.cu.o.ptxas"), recursive=True))
    if not reports:
        print(f"ptxas_spills: no ptxas reports under {args[0]} (built without nvcc?)", file=sys.stderr)
        return 2
    kernels = {}
    for path in reports:
        with open(path, encoding="utf-8", errors="replace") as f:
            for key, v in parse(f.read()).items():
                kernels[key] = dict(v, file=os.path.relpath(path, args[0])[: -len(".o.ptxas")])
    names = demangle(sorted({k[1] for k in kernels}))
    spilling = {(arch, names[m]): v for (arch, m), v in kernels.items() if v["stores"] or v["loads"]}
    built = {(arch, names[m]) for (arch, m) in kernels}
    if "--list" in sys.argv:
        for (arch, m), v in sorted(kernels.items(), key=lambda kv: (kv[1]["file"], kv[0])):
            print(f"{arch:7} {v['regs'] or 0:4} regs {v['stores']:4}/{v['loads']:<4} spill B  "
                  f"{v['file']}: {names[m]}")
    new = sorted(set(spilling) - set(KNOWN))
    gone = sorted(set(KNOWN) - set(spilling))
    worse = sorted(k for k in set(spilling) & set(KNOWN)
                   if spilling[k]["stores"] > KNOWN[k][0] or spilling[k]["loads"] > KNOWN[k][1])
    print(f"ptxas_spills: {len(kernels)} kernels in {len(reports)} reports; {len(spilling)} spill "
          f"({len(KNOWN)} known)")
    for arch, name in new:
        v = spilling[(arch, name)]
        print(f"  NEW SPILL {arch} {name}: {v['stores']} bytes stored, {v['loads']} loaded ({v['file']})")
    for arch, name in worse:
        v = spilling[(arch, name)]
        print(f"  MORE SPILL {arch} {name}: {v['stores']} bytes stored, {v['loads']} loaded, "
              f"KNOWN allows {KNOWN[(arch, name)][0]}/{KNOWN[(arch, name)][1]} ({v['file']})")
    for arch, name in gone:
        why = "no longer spills" if (arch, name) in built else "is no longer built"
        print(f"  {arch} {name} {why}: take it off KNOWN in {sys.argv[0]}")
    return 1 if new or gone or worse else 0


if __name__ == "__main__":
    sys.exit(main())
