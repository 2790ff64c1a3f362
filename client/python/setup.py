# SPDX-License-Identifier: BSD-3-Clause
# setup.py - only here to put the libdash.so that `make` built (../../build/libdash.so.0, or
# $DASH_LIBDASH) into the package when one exists, so that `pip install ./client/python`
# after `make` gives a package that works without setting DASH_LIBRARY; and the native
# op(s) `make torch-op` built beside it (libdash_torch_<torch version>.so: the package loads
# the one of its torch's version, dash_attn/_native.py). Nothing is compiled here.
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPy(build_py):
    def run(self):
        super().run()
        src = os.environ.get("DASH_LIBDASH") or os.path.join(HERE, "..", "..", "build", "libdash.so.0")
        if not os.path.exists(src):
            src = os.path.join(HERE, "..", "..", "build", "libdash.so")
        if os.path.exists(src):
            dst = os.path.join(self.build_lib, "dash_attn", "libdash.so.0")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)
            for op in glob.glob(os.path.join(os.path.dirname(src), "libdash_torch_*.so")):
                shutil.copyfile(op, os.path.join(os.path.dirname(dst), os.path.basename(op)))


setup(cmdclass={"build_py": BuildPy})
