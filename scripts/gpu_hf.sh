#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_hf.sh - on the GPU machine (device tool): the Hugging Face tests through a dashd on
# the GPU (issue 18's check). Installs transformers from the wheels that
# `WHAT=hf bash scripts/gpu_wheels.sh` put in .gpu/wheels-hf (no network there), then runs
# client/python/tests/test_hf.py with DASH_TEST_BACKEND=cuda: the tiny Llama trained twice
# on the GPU through one audited dashd, same bits, near transformers' eager attention.
# Needs the bundle's dashd, dashctl and libdash.so (.gpu/bin, .gpu/lib). Log: $OUT/hf.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 -m pip install -q --no-index --find-links "$root/.gpu/wheels-hf" transformers pytest \
  > "$out/hf-install.log" 2>&1 || { tail -5 "$out/hf-install.log"; exit 1; }
DASHD=$root/.gpu/bin/dashd \
  DASH_LIBRARY=$root/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$root/client/python \
  timeout 500 python3 -m pytest -q "$root/client/python/tests/test_hf.py" > "$out/hf.log" 2>&1
rc=$?
tail -5 "$out/hf.log"
exit $rc
