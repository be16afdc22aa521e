"""flashkit: IO-aware attention kernels and an LLM inference engine, from Python.

Text generation (``pip install .`` from the repository, then from any directory)::

    import flashkit
    m = flashkit.Model("models/target")                       # config.json + *.safetensors + tokenizer.json
    print(m.generate("Once upon a time", max_new_tokens=32, temperature=0.7, seed=1, stop=["\n\n"]))
    for piece in m.stream("Once upon a time"):                # text pieces as they are generated
        print(piece, end="", flush=True)
    tok = flashkit.Tokenizer.from_file("models/target/tokenizer.json")
    ids = tok.encode("Hello"); text = tok.decode(ids, skip_special_tokens=True)

Attention: numpy arrays in, numpy arrays out, through the library's C API (ctypes; no compiled extension)::

    import numpy as np, flashkit
    q = np.random.randn(2, 128, 8, 64).astype(np.float32)   # [batch, seqlen, heads, head_dim]
    o, lse = flashkit.attention(q, q, q, causal=True)        # o like q; lse float32 [batch, heads, seqlen]
    dq, dk, dv = flashkit.attention_backward(np.ones_like(o), q, q, q, o, lse, causal=True)

FP8 (e4m3) forward: ``q8, qd = flashkit.quantize_e4m3(q)`` (numpy.uint8 bytes and a per-tensor descale), then
``o, lse = flashkit.attention_fp8(q8, k8, v8, qd, kd, vd, causal=True)`` (o a BF16Array).

bfloat16: numpy has no such dtype, so ``flashkit.bf16(x)`` makes a :class:`BF16Array` (uint16 storage,
rounded to nearest even); attention on BF16Array operands returns BF16Array outputs (lse stays float32).

The native libraries are found through FLASHKIT_LIBRARY, else next to this package (an installed package), else
<repo>/build/lib (``bash tools/build.sh``), else the system library path. Attention needs only
libflashkit_core.so; the engine's libflashkit.so (tokenizer: PCRE2, ICU) is loaded by the first Model or Tokenizer.
"""

from . import _capi
from ._attention import Cost, attention, attention_backward
from ._attention_fp8 import attention_fp8, quantize_e4m3
from ._bf16 import BF16Array, bf16
from ._engine import Model, Session, sampling_defaults
from ._tokenizer import Tokenizer
from .errors import (
    DeviceError,
    FlashkitError,
    InternalError,
    InvalidArgumentError,
    OutOfMemoryError,
    UnsupportedError,
)

__all__ = [
    "attention",
    "attention_backward",
    "attention_fp8",
    "quantize_e4m3",
    "Cost",
    "BF16Array",
    "bf16",
    "Model",
    "Session",
    "Tokenizer",
    "sampling_defaults",
    "version",
    "cpu_isa",
    "max_threads",
    "num_threads",
    "set_num_threads",
    "cuda_device_count",
    "library_path",
    "engine_library_path",
    "FlashkitError",
    "InvalidArgumentError",
    "UnsupportedError",
    "OutOfMemoryError",
    "DeviceError",
    "InternalError",
]


def version() -> str:
    """The native library's version string, e.g. "0.1.0"."""
    return _capi._decode(_capi.lib.fk_version())


def cpu_isa() -> str:
    """The CPU instruction set the kernels dispatch to: "avx512", "avx2" or "scalar"
    (FLASHKIT_CPU_ISA can force a lower one)."""
    return _capi._decode(_capi.lib.fk_cpu_isa())


def num_threads() -> int:
    """Threads the CPU kernels use (FLASHKIT_NUM_THREADS, else the OpenMP default; 1 without OpenMP)."""
    return int(_capi.lib.fk_num_threads())


def max_threads() -> int:
    """The most threads any flashkit call accepts: 4 x this machine's hardware threads, at most 1024."""
    return int(_capi.lib.fk_max_threads())


def set_num_threads(n: int) -> None:
    """Sets the CPU kernels' thread count for the whole process; n must be an int in [1, max_threads()]."""
    import numbers

    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError("num_threads: expected an int in [1, %d], got %s %r" % (max_threads(), type(n).__name__, n))
    n = int(n)
    if not -(2**31) <= n < 2**31:
        raise ValueError("num_threads: expected 1..%d threads, got %d" % (max_threads(), n))
    _capi.check(_capi.lib.fk_set_num_threads(n))


def cuda_device_count() -> int:
    """CUDA devices visible to the library; 0 for a build without CUDA."""
    return int(_capi.lib.fk_cuda_device_count())


def library_path() -> str:
    """Path of the native library loaded at import (libflashkit_core.so: attention); the engine's libflashkit.so,
    loaded by the first Model or Tokenizer, is :func:`engine_library_path`."""
    return _capi.LIBRARY_PATH


def engine_library_path() -> str:
    """Path of the engine library (libflashkit.so: models, tokenizers), loaded or to be loaded on first use."""
    return _capi.ENGINE_LIBRARY_PATH


__version__ = version()
