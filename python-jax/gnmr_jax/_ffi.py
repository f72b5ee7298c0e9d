"""The C++ core, reached two ways: the XLA FFI handler "gnmr_jax_step"
(inside compiled programs) and a few C functions through ctypes (when a
guard is built: preset names, the initial state blob, checks).

Loading registers the handler for the CPU, and for CUDA when the package
was built with its CUDA library (setup.py). Nothing here is public API.
"""
from __future__ import annotations

import ctypes
import enum
import functools
import glob
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

TARGET = "gnmr_jax_step"
_HERE = os.path.dirname(os.path.abspath(__file__))

# The summary arrays' fields, in the order of csrc/common.hpp's write_summary.
COUNT_FIELDS = ("step", "triggered", "granted", "in_recovery", "denied", "nonfinite", "released",
                "max_ratio_unit", "skip_step", "systemic")
VALUE_FIELDS = ("max_ratio", "systemic_scale", "total_norm", "total_mean")


def _find(stem: str) -> Optional[str]:
    hits = sorted(glob.glob(os.path.join(_HERE, stem + "*.so")))
    return hits[0] if hits else None


def _load_cpu() -> ctypes.CDLL:
    path = _find("_gnmr_jax_cpu")
    if path is None:
        raise ImportError("gnmr_jax: the compiled FFI library (_gnmr_jax_cpu*.so) is missing; install the "
                          "package with pip install --no-build-isolation ./python-jax")
    lib = ctypes.CDLL(path)
    c_long, c_size, c_char_p, c_buf = ctypes.c_long, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p
    lib.gnmr_jax_version.restype = c_long
    lib.gnmr_jax_version.argtypes = [c_buf, c_size]
    lib.gnmr_jax_presets.restype = c_long
    lib.gnmr_jax_presets.argtypes = [c_buf, c_size]
    lib.gnmr_jax_preset_info.restype = c_long
    lib.gnmr_jax_preset_info.argtypes = [c_char_p, ctypes.POINTER(ctypes.c_int), c_buf, c_size, c_buf, c_size]
    lib.gnmr_jax_flag.restype = c_long
    lib.gnmr_jax_flag.argtypes = [c_char_p]
    lib.gnmr_jax_init_state.restype = c_long
    lib.gnmr_jax_init_state.argtypes = [c_char_p, c_char_p, c_size, ctypes.c_void_p, c_size, c_buf, c_size]
    lib.gnmr_jax_check_state.restype = c_long
    lib.gnmr_jax_check_state.argtypes = [c_char_p, c_char_p, c_size, ctypes.c_void_p, c_size,
                                         ctypes.POINTER(ctypes.c_longlong), c_buf, c_size]
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.GnmrJaxStep), platform="cpu")
    return lib


LIB = _load_cpu()


def _load_cuda() -> bool:
    path = os.path.join(_HERE, "_gnmr_jax_cuda.so")
    if not os.path.exists(path):
        return False
    try:
        lib = ctypes.CDLL(path)
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.GnmrJaxStepCuda), platform="CUDA")
    except Exception as e:  # a jaxlib without the CUDA platform, a missing driver library
        import warnings
        warnings.warn(f"gnmr_jax: the CUDA handler was built but cannot be registered ({e}); "
                      "the CPU handler is used", RuntimeWarning)
        return False
    return True


CUDA_BUILT = _load_cuda()


def _text(fn) -> str:
    need = fn(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    fn(buf, need + 1)
    return buf.value.decode()


def version() -> str:
    return _text(LIB.gnmr_jax_version)


@functools.lru_cache(maxsize=None)
def presets() -> Tuple[str, ...]:
    return tuple(n for n in _text(LIB.gnmr_jax_presets).split("\n") if n)


@functools.lru_cache(maxsize=None)
def preset_info(preset: str) -> Tuple[bool, Tuple[str, ...]]:
    """(is_global, the overrides it takes); ValueError for an unknown name."""
    glob_ = ctypes.c_int(0)
    err = ctypes.create_string_buffer(4096)
    buf = ctypes.create_string_buffer(4096)
    if LIB.gnmr_jax_preset_info(preset.encode(), ctypes.byref(glob_), buf, 4096, err, 4096) < 0:
        raise ValueError(err.value.decode())
    return bool(glob_.value), tuple(k for k in buf.value.decode().split("\n") if k)


class Flag(enum.IntFlag):
    """The unit flags (gnmr/core/types.hpp), read from the C++ library."""
    TRIGGERED = LIB.gnmr_jax_flag(b"TRIGGERED")
    GRANTED = LIB.gnmr_jax_flag(b"GRANTED")
    IN_RECOVERY = LIB.gnmr_jax_flag(b"IN_RECOVERY")
    DENIED = LIB.gnmr_jax_flag(b"DENIED")
    COOLDOWN = LIB.gnmr_jax_flag(b"COOLDOWN")
    NONFINITE = LIB.gnmr_jax_flag(b"NONFINITE")
    SKIP = LIB.gnmr_jax_flag(b"SKIP")
    RESET_MOMENTS = LIB.gnmr_jax_flag(b"RESET_MOMENTS")
    PROMOTE = LIB.gnmr_jax_flag(b"PROMOTE")
    RELEASED = LIB.gnmr_jax_flag(b"RELEASED")
    WARMUP = LIB.gnmr_jax_flag(b"WARMUP")
    ZERO_NORM = LIB.gnmr_jax_flag(b"ZERO_NORM")
    SYSTEMIC = LIB.gnmr_jax_flag(b"SYSTEMIC")
    RESTART = LIB.gnmr_jax_flag(b"RESTART")


def options_text(overrides: Dict[str, object]) -> str:
    """The overrides as the handler's "options" attribute: "key=value" lines
    in key order (the same overrides give the same text, so one pooled
    controller kind). Floats as repr(): the C++ side reads the same double."""
    lines = []
    for k in sorted(overrides):
        v = overrides[k]
        if isinstance(v, bool):
            raise TypeError(f"gnmr_jax: override '{k}' must be a number or a str, got bool")
        if isinstance(v, (int, np.integer)):
            text = str(int(v))
        elif isinstance(v, (float, np.floating)):
            text = repr(float(v))
        elif isinstance(v, str):
            if "\n" in v or "=" in v:
                raise ValueError(f"gnmr_jax: override '{k}' has a newline or '=': {v!r}")
            text = v
        else:
            raise TypeError(f"gnmr_jax: override '{k}' must be a number or a str, got {type(v).__name__}")
        lines.append(f"{k}={text}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=256)
def initial_state(preset: str, options: str, num_units: int) -> bytes:
    """The fresh controller's state blob (DynController::save()); ValueError
    with the C++ message for a bad preset or override."""
    err = ctypes.create_string_buffer(4096)
    size = LIB.gnmr_jax_init_state(preset.encode(), options.encode(), num_units, None, 0, err, 4096)
    if size < 0:
        raise ValueError(err.value.decode())
    buf = (ctypes.c_uint8 * size)()
    LIB.gnmr_jax_init_state(preset.encode(), options.encode(), num_units, buf, size, err, 4096)
    return bytes(buf)


def check_state(preset: str, options: str, num_units: int, blob: np.ndarray) -> int:
    """Loads blob into a fresh controller: its step count, or ValueError
    with the library's message (truncated, corrupted, another preset...)."""
    data = np.ascontiguousarray(blob, dtype=np.uint8)
    steps = ctypes.c_longlong(0)
    err = ctypes.create_string_buffer(4096)
    if LIB.gnmr_jax_check_state(preset.encode(), options.encode(), num_units, data.ctypes.data, data.size,
                                ctypes.byref(steps), err, 4096) < 0:
        raise ValueError(err.value.decode())
    return int(steps.value)


class StepOut(NamedTuple):
    blob: jax.Array
    scale: jax.Array
    flags: jax.Array
    counts: jax.Array
    values: jax.Array


def step(partials: jax.Array, blob: jax.Array, preset: str, options: str) -> StepOut:
    """One controller step inside a traced program: the FFI call. The new
    state is written over the old one's buffer (input_output_aliases), so a
    donated state is updated in place."""
    n = partials.shape[0]
    out_types = (jax.ShapeDtypeStruct(blob.shape, jnp.uint8),
                 jax.ShapeDtypeStruct((n,), jnp.float32),
                 jax.ShapeDtypeStruct((n,), jnp.uint32),
                 jax.ShapeDtypeStruct((len(COUNT_FIELDS),), jnp.int32),
                 jax.ShapeDtypeStruct((len(VALUE_FIELDS),), jnp.float32))
    call = jax.ffi.ffi_call(TARGET, out_types, input_output_aliases={1: 0}, vmap_method="sequential")
    return StepOut(*call(partials, blob, preset=preset, options=options))
