"""Builds gnmr_jax's FFI handlers: a plain shared library per platform,
loaded with ctypes and registered with jax.ffi.register_ffi_target
(gnmr_jax/_ffi.py). It is not a Python extension module (it has no
PyInit_): setuptools' Extension only drives the compiler.

- gnmr_jax/_gnmr_jax_cpu*.so: the CPU handler and the C API, from
  gnmr_jax/csrc/ffi_cpu.cpp, always.
- gnmr_jax/_gnmr_jax_cuda.so: the CUDA handler, from gnmr_jax/csrc/ffi_cuda.cu,
  compiled by nvcc when GNMR_JAX_CUDA=1, or when nvcc is found and a JAX
  CUDA plugin (jax_cuda12_plugin, jax_cuda13_plugin) is installed;
  GNMR_JAX_CUDA=0 never builds it. CUDA_ARCHS (e.g. "80;90") picks the
  architectures (default: nvcc's).

The library headers are the repository's ../include (or GNMR_INCLUDE_DIR);
XLA's FFI headers are the installed jaxlib's (jax.ffi.include_dir()), hence
`pip install --no-build-isolation ./python-jax` into an environment with jax.
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("gnmr_jax", "csrc")


def gnmr_include():
    inc = os.path.abspath(os.environ.get("GNMR_INCLUDE_DIR") or os.path.join(HERE, os.pardir, "include"))
    if not os.path.isfile(os.path.join(inc, "gnmr", "gnmr.hpp")):
        sys.exit(f"gnmr_jax setup.py: the gnmr headers are not at {inc}; build from the gnmr "
                 "repository (pip install --no-build-isolation ./python-jax) or set GNMR_INCLUDE_DIR")
    return inc


def xla_include():
    try:
        import jax.ffi
    except ImportError:
        sys.exit("gnmr_jax setup.py: jax is not importable; install jax and jaxlib first and build "
                 "with pip install --no-build-isolation ./python-jax")
    return jax.ffi.include_dir()


def version(inc):
    text = open(os.path.join(inc, "gnmr", "config.hpp")).read()
    return ".".join(re.search(rf"#define GNMR_VERSION_{k} (\d+)", text).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))


# -ffp-contract=off: what gnmr's CMake target gives every consumer, so that
# host decisions are the device's bits (no FMA contraction). -g0: Python's
# CFLAGS ask for debug info, which triples the build time for no user benefit.
# -fvisibility=hidden: only the handler and the C API are exported.
CXXFLAGS = ["-std=c++17", "-O2", "-g0", "-ffp-contract=off", "-fvisibility=hidden", "-Wall", "-Wextra"]


def want_cuda():
    flag = os.environ.get("GNMR_JAX_CUDA", "")
    if flag == "0":
        return None
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                     if os.environ.get("CUDA_HOME") else None)
    plugin = any(importlib.util.find_spec(m) is not None for m in ("jax_cuda12_plugin", "jax_cuda13_plugin"))
    if flag == "1" and not (nvcc and os.path.exists(nvcc)):
        sys.exit("gnmr_jax setup.py: GNMR_JAX_CUDA=1 but nvcc was not found (PATH, CUDA_HOME)")
    if flag == "1" or (plugin and nvcc and os.path.exists(nvcc)):
        return nvcc
    return None


def nvcc_command(nvcc, gnmr_inc, xla_inc, source, out):
    """The CUDA handler's build: one nvcc call to a shared library (also
    what tests/jax/test_cuda_build.py compiles, without linking, where nvcc
    is found)."""
    archs = [a for a in re.split(r"[;, ]+", os.environ.get("CUDA_ARCHS", "")) if a]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return [nvcc, "-std=c++17", "-O2", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC,-ffp-contract=off,-fvisibility=hidden",
            "-I", gnmr_inc, "-I", os.path.join(HERE, CSRC), "-isystem", xla_inc, *gencode,
            "-shared", source, "-o", out]


class BuildExt(build_ext):
    def run(self):
        super().run()
        nvcc = want_cuda()
        if nvcc is None:
            return
        out_dir = os.path.join(self.build_lib, "gnmr_jax")
        if self.inplace:
            out_dir = os.path.join(HERE, "gnmr_jax")
        os.makedirs(out_dir, exist_ok=True)
        cmd = nvcc_command(nvcc, gnmr_include(), xla_include(), os.path.join(HERE, CSRC, "ffi_cuda.cu"),
                           os.path.join(out_dir, "_gnmr_jax_cuda.so"))
        print("gnmr_jax: building the CUDA handler:", " ".join(cmd))
        subprocess.check_call(cmd)


if __name__ == "__main__":
    inc = gnmr_include()
    # Every header the handler includes: an edited header rebuilds it (pip
    # builds in python-jax/build/, where an unchanged tree is not recompiled).
    depends = sorted(glob.glob(os.path.join(inc, "gnmr", "**", "*.hpp"), recursive=True)
                     + glob.glob(os.path.join(HERE, CSRC, "*.hpp")))
    ext = Extension("gnmr_jax._gnmr_jax_cpu", sources=[os.path.join(CSRC, "ffi_cpu.cpp")], depends=depends,
                    include_dirs=[inc, os.path.join(HERE, CSRC)], language="c++",
                    extra_compile_args=CXXFLAGS + ["-isystem", xla_include()])
    setup(version=version(inc), ext_modules=[ext], cmdclass={"build_ext": BuildExt})
