"""ctypes binding of the flashkit C API (include/flashkit/flashkit.h).

This module mirrors the C structs field for field, declares every function's argument and return
types, and finds and loads the shared libraries. It knows nothing about numpy; the public wrappers live
in flashkit._attention. flashkit.torch (and other front ends) may use :func:`make_tensor`,
:func:`make_options` and :func:`check` to call the library on their own buffers.

Two libraries: ``libflashkit_core.so`` (attention, errors, threads; needs OpenBLAS and OpenMP only) is loaded at
import as :data:`lib`; ``libflashkit.so`` (models, tokenizers, generation; also needs PCRE2 and ICU) is loaded on
first use by :func:`engine_lib` (``flashkit.Model`` / ``flashkit.Tokenizer``), so attention works where the
tokenizer's libraries are missing. Both are opened with RTLD_LOCAL: their symbols never interpose on those of other
libraries in the process (numpy's and torch's own OpenBLAS / OpenMP copies), nor theirs on flashkit's.

Library discovery (of libflashkit.so; libflashkit_core.so is taken from the same folder), first match wins:
  1. the path in the environment variable FLASHKIT_LIBRARY (an ImportError if that file is missing);
  2. next to this file (an installed package: ``pip install .`` puts the libraries there);
  3. <repo>/build/lib next to this package (what ``bash tools/build.sh`` produces, for development);
  4. ``ctypes.util.find_library("flashkit")`` (an installed library).
"""

import ctypes
import ctypes.util
import os
import sys
import threading

from .errors import error_for_status

# fk_status
FK_OK = 0
FK_INVALID_ARGUMENT = 1
FK_UNSUPPORTED = 2
FK_OUT_OF_MEMORY = 3
FK_DEVICE_ERROR = 4
FK_INTERNAL = 5

# fk_dtype
FK_F32 = 0
FK_BF16 = 1
FK_F16 = 2
FK_F64 = 3
FK_I32 = 4
FK_E4M3 = 5  # fk_attention_forward_fp8 / fk_quantize_e4m3 only (flashkit.torch.attention_forward_fp8)

# fk_device
FK_CPU = 0
FK_CUDA = 1

# fk_impl
FK_IMPL_AUTO = 0
FK_IMPL_REFERENCE = 1
FK_IMPL_STANDARD = 2
FK_IMPL_FLASH = 3

# Accepted impl spellings (the C++ parse_impl accepts the same aliases).
IMPL_CODES = {
    "auto": FK_IMPL_AUTO,
    "reference": FK_IMPL_REFERENCE,
    "ref": FK_IMPL_REFERENCE,
    "standard": FK_IMPL_STANDARD,
    "std": FK_IMPL_STANDARD,
    "flash": FK_IMPL_FLASH,
}


class FkTensor(ctypes.Structure):
    """fk_tensor: a strided view of up to 4 dimensions; strides are in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class FkAttentionOptions(ctypes.Structure):
    """fk_attention_options (see flashkit.h for each field's meaning)."""

    _fields_ = [
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)),
        ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int32)),
        ("num_seqs", ctypes.c_int64),
        ("impl", ctypes.c_int32),
        ("check_finite", ctypes.c_int32),
    ]


class FkCost(ctypes.Structure):
    """fk_cost: what an implementation did, under the byte-counting model named in ``model``."""

    _fields_ = [
        ("flops", ctypes.c_double),
        ("bytes_read", ctypes.c_double),
        ("bytes_written", ctypes.c_double),
        ("workspace_bytes", ctypes.c_double),
        ("model", ctypes.c_char * 256),
        ("kernel", ctypes.c_char * 64),
    ]


class FkFp8Scales(ctypes.Structure):
    """fk_fp8_scales: the per-tensor descales of fk_attention_forward_fp8 (real value = stored e4m3 * descale)."""

    _fields_ = [
        ("q_descale", ctypes.c_float),
        ("k_descale", ctypes.c_float),
        ("v_descale", ctypes.c_float),
    ]


# Sizes the C compiler gives these structs on LP64 platforms; checked at load time so a drifted
# header is caught before any call passes a mis-laid-out struct.
_EXPECTED_SIZES = {FkTensor: 88, FkAttentionOptions: 64, FkCost: 352, FkFp8Scales: 12}

_BUILD_HINT = (
    "build it with `bash tools/build.sh` from the repository root (it produces build/lib/libflashkit.so), "
    "or set the environment variable FLASHKIT_LIBRARY to the full path of libflashkit.so"
)


def _library_names():
    if sys.platform == "darwin":
        return ["libflashkit.dylib", "libflashkit.so"]
    if os.name == "nt":
        return ["flashkit.dll", "libflashkit.dll"]
    return ["libflashkit.so"]


def find_library_path(environ=None, package_dir=None, find_library=None):
    """Returns the path of the flashkit shared library (libflashkit.so) to load, or raises ImportError.

    Arguments default to the real environment, this package's directory and
    ctypes.util.find_library; tests pass their own.
    """
    environ = os.environ if environ is None else environ
    package_dir = os.path.dirname(os.path.abspath(__file__)) if package_dir is None else package_dir
    find_library = ctypes.util.find_library if find_library is None else find_library

    explicit = environ.get("FLASHKIT_LIBRARY")
    if explicit:
        if not os.path.isfile(explicit):
            raise ImportError(
                "flashkit: the environment variable FLASHKIT_LIBRARY is set to %r, but that file does not exist; "
                "point it at libflashkit.so (e.g. <repo>/build/lib/libflashkit.so), or unset it to use the library "
                "that `bash tools/build.sh` builds into <repo>/build/lib" % (explicit,)
            )
        return explicit

    build_lib = os.path.normpath(os.path.join(package_dir, os.pardir, os.pardir, "build", "lib"))
    for folder in (package_dir, build_lib):
        for name in _library_names():
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate):
                return candidate

    found = find_library("flashkit")
    if found:
        return found

    raise ImportError(
        "flashkit: the native library libflashkit was not found (looked for FLASHKIT_LIBRARY, %s, %s, and the "
        "system library path); %s"
        % (os.path.join(package_dir, _library_names()[0]), os.path.join(build_lib, _library_names()[0]), _BUILD_HINT)
    )


def core_library_path(library_path, find_library=None):
    """The attention library for the engine library at `library_path`: libflashkit_core.so in the same folder, else
    the system's, else `library_path` itself (a library built before the split holds everything)."""
    find_library = ctypes.util.find_library if find_library is None else find_library
    folder = os.path.dirname(library_path)
    if folder:
        candidate = os.path.join(folder, "libflashkit_core" + os.path.splitext(library_path)[1])
        if os.path.isfile(candidate):
            return candidate
    return find_library("flashkit_core") or library_path


# OpenMP reads its wait policy once, when the runtime loads: ask for passive waits (idle CPU threads sleep instead of
# spinning, which made decode 4.7x slower next to one busy process; bench/results/cpu-contention.md) unless the
# user chose a policy, or an OpenMP runtime is already loaded (numpy/torch first: then this changes nothing).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

# RTLD_LOCAL: flashkit's symbols (and those of the OpenBLAS / OpenMP it links) stay out of the global scope, so a
# later numpy or torch does not bind to them. RTLD_NOW: a missing symbol is an ImportError here, not a crash later.
_DLOPEN_MODE = getattr(os, "RTLD_NOW", 2) | getattr(os, "RTLD_LOCAL", 0)


def _dlopen_mode(environ=None):
    """RTLD_NOW | RTLD_LOCAL, plus RTLD_DEEPBIND with FLASHKIT_DLOPEN=deepbind (a diagnostic switch: the library
    then binds to its own dependencies before any copy already loaded in the process)."""
    environ = os.environ if environ is None else environ
    mode = _DLOPEN_MODE
    if environ.get("FLASHKIT_DLOPEN", "") == "deepbind":
        mode |= getattr(os, "RTLD_DEEPBIND", 0)
    return mode


def _declare(lib):
    c_char_p, c_int32, c_void_p = ctypes.c_char_p, ctypes.c_int32, ctypes.c_void_p
    tensor_p = ctypes.POINTER(FkTensor)
    opts_p = ctypes.POINTER(FkAttentionOptions)
    cost_p = ctypes.POINTER(FkCost)
    scales_p = ctypes.POINTER(FkFp8Scales)
    protos = {
        "fk_version": (c_char_p, []),
        "fk_last_error": (c_char_p, []),
        "fk_status_name": (c_char_p, [c_int32]),
        "fk_cpu_isa": (c_char_p, []),
        "fk_tuning_from_env": (None, []),
        "fk_num_threads": (c_int32, []),
        "fk_set_num_threads": (c_int32, [c_int32]),
        "fk_max_threads": (c_int32, []),
        "fk_cuda_device_count": (c_int32, []),
        "fk_attention_options_init": (c_int32, [opts_p]),
        "fk_tensor_init": (c_int32, [tensor_p, c_void_p, c_int32, c_int32, c_int32, ctypes.POINTER(ctypes.c_int64)]),
        "fk_attention_forward": (c_int32, [tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, opts_p, cost_p]),
        "fk_attention_forward_fp8": (c_int32, [tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, scales_p, opts_p,
                                                cost_p]),
        "fk_quantize_e4m3": (c_int32, [tensor_p, tensor_p, ctypes.POINTER(ctypes.c_float)]),
        "fk_attention_backward": (
            c_int32,
            [tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, tensor_p, opts_p, cost_p],
        ),
    }
    for name, (restype, argtypes) in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(
                "flashkit: the library %r does not export %s; it is not a flashkit build, or an old one (%s)"
                % (getattr(lib, '_name', '?'), name, _BUILD_HINT)
            ) from None
        fn.restype = restype
        fn.argtypes = argtypes


def _open(path, what):
    try:
        return ctypes.CDLL(path, mode=_dlopen_mode())
    except OSError as e:
        raise ImportError("flashkit: could not load the native %s %r: %s; %s" % (what, path, e, _BUILD_HINT)) from None


def _load():
    path = find_library_path()
    core_path = core_library_path(path)
    return path, core_path, _open(core_path, "library")


for _cls, _size in _EXPECTED_SIZES.items():
    if ctypes.sizeof(ctypes.c_void_p) == 8 and ctypes.sizeof(_cls) != _size:  # pragma: no cover
        raise ImportError("flashkit: ctypes layout of %s is %d bytes, expected %d" % (_cls.__name__, ctypes.sizeof(_cls), _size))

# ENGINE_LIBRARY_PATH: libflashkit.so (models, tokenizers), loaded by engine_lib() on first use; LIBRARY_PATH: the
# library loaded now (libflashkit_core.so, or libflashkit.so itself for a library built before the split).
ENGINE_LIBRARY_PATH, LIBRARY_PATH, core_lib = _load()
_declare(core_lib)
core_lib.fk_tuning_from_env()  # the FLASHKIT_* variables are read here, once, into the library's default tuning

_engine_lock = threading.Lock()
_engine = None


def engine_lib():
    """libflashkit.so (models, tokenizers, generation), loaded on the first call; ImportError naming the missing
    library (PCRE2, ICU, ...) if it cannot be loaded. Its libflashkit_core.so is the one already loaded."""
    global _engine
    with _engine_lock:
        if _engine is None:
            if ENGINE_LIBRARY_PATH == LIBRARY_PATH:
                _engine = core_lib
            else:
                try:
                    _engine = ctypes.CDLL(ENGINE_LIBRARY_PATH, mode=_dlopen_mode())
                except OSError as e:
                    raise ImportError(
                        "flashkit: could not load the model/tokenizer library %r: %s (attention does not need it: "
                        "flashkit.attention and flashkit.torch work without it); install the missing library "
                        "(tools/install-deps.sh) or rebuild (%s)" % (ENGINE_LIBRARY_PATH, e, _BUILD_HINT)) from None
        return _engine


class _Library:
    """The C API as one object: attention functions from libflashkit_core.so; any other fk_* name loads
    libflashkit.so (engine_lib()) on first use. Kept for code that calls ``_capi.lib.fk_...`` directly."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            fn = getattr(core_lib, name)
        except AttributeError:
            fn = getattr(engine_lib(), name)
        setattr(self, name, fn)
        return fn


lib = _Library()


def _decode(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def last_error():
    """The calling thread's last library error message (empty after a successful call)."""
    return _decode(lib.fk_last_error())


def check(status):
    """Raises the flashkit error for a non-zero status, with the library's message."""
    if status != FK_OK:
        message = last_error() or ("flashkit call failed with status %s" % _decode(lib.fk_status_name(status)))
        raise error_for_status(status, message)


def make_tensor(data_ptr, dtype, shape, strides, device=FK_CPU, device_index=0):
    """An FkTensor over caller-owned memory. shape and strides (in elements) have at most 4 entries."""
    t = FkTensor()
    t.data = data_ptr
    t.dtype = dtype
    t.device = device
    t.device_index = device_index
    t.ndim = len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        t.shape[i] = n
        t.strides[i] = s
    return t


def make_options(scale=0.0, causal=False, window_left=-1, window_right=-1, softcap=0.0, cu_seqlens_q=None,
                 cu_seqlens_k=None, num_seqs=0, impl=FK_IMPL_AUTO, check_finite=True):
    """An FkAttentionOptions from already-validated values.

    cu_seqlens_q/k are raw addresses (ints) of int32 arrays of num_seqs+1 entries, or None; the caller
    keeps those arrays alive for the duration of the call.
    """
    o = FkAttentionOptions()
    check(lib.fk_attention_options_init(ctypes.byref(o)))
    o.scale = scale
    o.causal = 1 if causal else 0
    o.window_left = window_left
    o.window_right = window_right
    o.softcap = softcap
    i32p = ctypes.POINTER(ctypes.c_int32)
    o.cu_seqlens_q = ctypes.cast(cu_seqlens_q, i32p) if cu_seqlens_q is not None else None
    o.cu_seqlens_k = ctypes.cast(cu_seqlens_k, i32p) if cu_seqlens_k is not None else None
    o.num_seqs = num_seqs
    o.impl = impl
    o.check_finite = 1 if check_finite else 0
    return o
