#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""arch_graph.py - the picture of docs/architecture.md, from the code: one node per module
(a .c/.cu file with its header, or a header alone), one box per part (the folders of the
Makefile's include roots), one arrow per #include between modules of different files.
With --parts, one node per part and one arrow per pair of parts that include each other
(the layering the Makefile's INC_* include roots enforce), labelled with the number of
includes. Prints Graphviz dot; `make docs` renders both to docs/architecture-*.svg.
    python3 scripts/arch_graph.py [--parts] > FILE.dot
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the parts, in the order they are drawn (as in docs/architecture.md's table)
PARTS = [
    ("kernels/sched", "kernels/sched: the paper's schedules, DAG model"),
    ("kernels/attn", "kernels/attn: problem, dtypes, reference"),
    ("kernels/cpu", "kernels/cpu: CPU engine"),
    ("kernels/cuda", "kernels/cuda: CUDA kernels"),
    ("kernels/digest", "kernels/digest: output digests"),
    ("proto", "proto: wire, errors, audit file"),
    ("client", "client: libdash"),
    ("client/dashctl", "client/dashctl: dashctl"),
    ("daemon", "daemon: dashd"),
]
SOURCES = (".c", ".cu", ".h", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def part_of(path):
    best = None
    for folder, _ in PARTS:
        if os.path.dirname(path) == folder:
            best = folder
    return best


def module_of(path):
    """A file's module: its stem (engine.c, engine.h -> kernels/cpu/engine)."""
    return os.path.splitext(path)[0]


def scan():
    files = []
    for folder, _ in PARTS:
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(SOURCES):
                files.append(os.path.join(folder, name))
    edges = set()
    for f in files:
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            if not inc.startswith(("kernels/", "proto/", "client/", "daemon/")):
                # daemon/ includes its own headers by bare name
                inc = os.path.join(os.path.dirname(f), inc)
            if not os.path.exists(os.path.join(ROOT, inc)):
                continue
            a, b = module_of(f), module_of(inc)
            if a != b:
                edges.add((a, b))
    return files, edges


def parts_graph(edges):
    count = {}
    for a, b in edges:
        pa, pb = part_of(a + ".x"), part_of(b + ".x")
        if pa and pb and pa != pb:
            count[(pa, pb)] = count.get((pa, pb), 0) + 1
    out = ["digraph dashd_parts {", '  rankdir=TB; node [shape=box, style=rounded, fontname="Helvetica", fontsize=11];',
           '  edge [color="#555555", fontname="Helvetica", fontsize=9];']
    for folder, label in PARTS:
        out.append('  "%s" [label="%s"];' % (folder, label.replace(": ", "\\n")))
    for (a, b), n in sorted(count.items()):
        out.append('  "%s" -> "%s" [label="%d"];' % (a, b, n))
    out.append("}")
    return out


def main():
    files, edges = scan()
    if sys.argv[1:] == ["--parts"]:
        sys.stdout.write("\n".join(parts_graph(edges)) + "\n")
        return
    modules = {}
    for f in files:
        modules.setdefault(part_of(f), set()).add(module_of(f))
    out = ["digraph dashd {", '  rankdir=TB; node [shape=box, fontname="Helvetica", fontsize=10];',
           '  edge [color="#555555", arrowsize=0.6]; compound=true;']
    for i, (folder, label) in enumerate(PARTS):
        out.append("  subgraph cluster_%d {" % i)
        out.append('    label="%s"; fontname="Helvetica"; fontsize=11; style=rounded;' % label)
        for m in sorted(modules.get(folder, ())):
            out.append('    "%s" [label="%s"];' % (m, os.path.basename(m)))
        out.append("  }")
    for a, b in sorted(edges):
        out.append('  "%s" -> "%s";' % (a, b))
    out.append("}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
