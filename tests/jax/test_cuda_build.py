"""The CUDA handler (python-jax/gnmr_jax/csrc/ffi_cuda.cu) compiles and
links with nvcc where nvcc is found, with the command setup.py uses, and
exports its FFI symbol: it cannot break unnoticed on a machine without a
GPU. It is not run here (awaiting a GPU run, docs/jax.md).

The build takes about a minute on two cores, so a stamp of what it was
built from (the sources, every header under include/, nvcc's version) in
python-jax/build/ lets an unchanged tree skip it. GNMR_JAX_CUDA_CHECK=0
skips the test.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

HERE = ROOT / "python-jax"


def nvcc():
    cand = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return cand if os.path.exists(cand) else None


def load_setup():
    spec = importlib.util.spec_from_file_location("gnmr_jax_setup", HERE / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # setup() itself runs only as __main__
    return mod


@pytest.mark.skipif(os.environ.get("GNMR_JAX_CUDA_CHECK") == "0", reason="GNMR_JAX_CUDA_CHECK=0")
def test_the_cuda_handler_compiles_and_links(tmp_path):
    exe = nvcc()
    if exe is None:
        pytest.skip("nvcc not found: the CUDA handler is not compiled on this machine")
    setup = load_setup()
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256(version.encode())
    files = [HERE / "setup.py", *sorted((HERE / "gnmr_jax" / "csrc").iterdir()),
             *sorted((ROOT / "include").rglob("*"))]
    for f in files:
        if f.is_file():
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    stamp = HERE / "build" / "cuda-check.stamp"
    if stamp.exists() and stamp.read_text() == h.hexdigest():
        return  # built from exactly these files before
    out = tmp_path / "_gnmr_jax_cuda.so"
    cmd = setup.nvcc_command(exe, str(ROOT / "include"), setup.xla_include(),
                             str(HERE / "gnmr_jax" / "csrc" / "ffi_cuda.cu"), str(out))
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}{r.stderr}"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(out)], capture_output=True, text=True).stdout
    assert " T GnmrJaxStepCuda" in syms
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(h.hexdigest())
