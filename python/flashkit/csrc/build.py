"""Builds torch.ops.flashkit (flashkit_torch.cpp) against the PyTorch this Python imports and the flashkit library
that flashkit._capi loads.

    python3 python/flashkit/csrc/build.py            # -> build/torch_ext/<tag>/flashkit_torch.so
    python3 python/flashkit/csrc/build.py --print    # just print where it goes
    python3 python/flashkit/csrc/build.py --if-headers   # exit 0 with a note when torch's C++ headers are absent

It goes beside the library flashkit._capi loads (build/lib -> build/torch_ext). The tag names the torch version and whether CUDA kernels are registered, so a build for one torch is never loaded
into another; flashkit._torch_ops finds it there (or at $FLASHKIT_TORCH_EXT). CUDA kernels are compiled in when
this torch has CUDA and its CUDA headers are present (the extension itself has no device code: it only needs
ATen's current-stream call). Needs ninja and a C++17 compiler; about a minute on two cores.
"""

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir, os.pardir))
sys.path.insert(0, os.path.join(_REPO, "python"))

# Not flashkit._torch_ops: importing it registers the custom-op fallback (torch >= 2.4), and the extension loaded
# below would then clash with it (duplicate registration of flashkit::fwd).
from flashkit import _torch_ext_path  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print the output path and exit")
    ap.add_argument("--cpu-only", action="store_true", help="register the CPU kernels only")
    ap.add_argument("--if-headers", action="store_true",
                    help="without torch's C++ headers, print a note and exit 0 (the ctypes path stays in use)")
    args = ap.parse_args()

    import torch
    import torch.utils.cpp_extension as ext
    from flashkit import _capi

    with_cuda = torch.version.cuda is not None and not args.cpu_only and ext.CUDA_HOME is not None
    out_dir = _torch_ext_path.extension_dir(with_cuda)
    if args.print:
        print(os.path.join(out_dir, "flashkit_torch.so"))
        return 0
    if not any(os.path.isfile(os.path.join(d, "ATen", "ATen.h")) for d in ext.include_paths()):
        print("flashkit_torch: not built: torch's C++ headers (ATen/ATen.h) are missing (Debian: libtorch-dev)")
        return 0 if args.if_headers else 1
    os.makedirs(out_dir, exist_ok=True)
    lib_dir = os.path.dirname(os.path.realpath(_capi.find_library_path()))
    flags = ["-O2"] + (["-DFLASHKIT_TORCH_CUDA"] if with_cuda else [])
    if int(torch.__version__.split(".")[0]) < 2:
        flags.append("-std=c++17")  # torch 1.x extensions default to C++14; flashkit's headers need C++17
    ext.load(name="flashkit_torch", sources=[os.path.join(_HERE, "flashkit_torch.cpp")],
             extra_cflags=flags, extra_include_paths=[os.path.join(_REPO, "include")],
             extra_ldflags=["-L" + lib_dir, "-lflashkit", "-Wl,-rpath," + lib_dir],
             with_cuda=with_cuda, build_directory=out_dir, is_python_module=False, verbose=False)
    print(os.path.join(out_dir, "flashkit_torch.so"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
