"""Builds gnmr._C, the extension under the gnmr package, with
torch.utils.cpp_extension (docs/python.md says why not CMake).

The library headers are the repository's ../include (or GNMR_INCLUDE_DIR).
CUDA is built when the torch doing the build has CUDA and nvcc is found
(CUDA_HOME), for the architectures torch's own rule picks: TORCH_CUDA_ARCH_LIST
if set, else those of the GPUs visible at build time. GNMR_CUDA=0 forces a
CPU-only build, GNMR_CUDA=1 makes a missing CUDA toolchain an error.
"""
import os
import re
import sys

from setuptools import setup
import torch
from torch.utils import cpp_extension

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("gnmr", "csrc")


def include_dir():
    inc = os.environ.get("GNMR_INCLUDE_DIR") or os.path.join(HERE, os.pardir, "include")
    inc = os.path.abspath(inc)
    if not os.path.isfile(os.path.join(inc, "gnmr", "gnmr.hpp")):
        sys.exit(f"gnmr setup.py: the gnmr headers are not at {inc}; build from the gnmr "
                 "repository (pip install ./python) or set GNMR_INCLUDE_DIR")
    return inc


def version(inc):
    text = open(os.path.join(inc, "gnmr", "config.hpp")).read()
    parts = [re.search(rf"#define GNMR_VERSION_{k} (\d+)", text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def want_cuda():
    flag = os.environ.get("GNMR_CUDA", "")
    possible = torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None
    if flag == "0":
        return False
    if flag == "1" and not possible:
        sys.exit("gnmr setup.py: GNMR_CUDA=1 but torch has no CUDA "
                 f"(torch.version.cuda={torch.version.cuda}) or nvcc was not found "
                 f"(CUDA_HOME={cpp_extension.CUDA_HOME})")
    return possible


def cxx_std():
    # PyTorch's headers need C++20 from 2.12 on (demo/CMakeLists.txt has the
    # same rule); gnmr's own code compiles as C++17 and C++20.
    major, minor = (int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    return "-std=c++20" if (major, minor) >= (2, 12) else "-std=c++17"


def extension():
    inc = include_dir()
    cuda = want_cuda()
    sources = [os.path.join(CSRC, f) for f in ("module.cpp", "cores.cpp", "tables.cpp")]
    sources.append(os.path.join(CSRC, "device.cu" if cuda else "device_none.cpp"))
    # -ffp-contract=off: decisions must be the bits the device computes
    # (gnmr's CMake target gives every consumer this flag; here it is ours).
    # -g0: Python's own CFLAGS ask for debug info, which triples the build
    # time and the size of the module for no user benefit.
    # -fopenmp: torch's at::parallel_for (the CPU norms and AdamW use it) is
    # an inline OpenMP loop when torch's parallel backend is OpenMP, as in
    # the PyPI wheels; without the flag it compiles to one thread. The
    # runtime is the libgomp.so.1 torch itself loaded (same soname), so
    # torch.set_num_threads governs it.
    omp = ["-fopenmp"] if "OpenMP" in torch.__config__.parallel_info() else []
    # -fno-math-errno: sqrtf's errno path keeps the host AdamW loop scalar
    # (it changes no result: gnmr never reads errno).
    cxx = ["-O3", "-g0", cxx_std(), "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra",
           "-Wno-unused-parameter", "-Wno-deprecated-declarations"] + omp
    nvcc = ["-O3", cxx_std(), "-Xcompiler=-ffp-contract=off"]
    kind = cpp_extension.CUDAExtension if cuda else cpp_extension.CppExtension
    return kind(name="gnmr._C", sources=sources, include_dirs=[inc, os.path.join(HERE, CSRC)],
                extra_compile_args={"cxx": cxx, "nvcc": nvcc}, extra_link_args=omp), version(inc)


ext, ver = extension()
setup(
    version=ver,
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
