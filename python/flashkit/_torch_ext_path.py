"""Where python/flashkit/csrc/build.py puts the torch.ops.flashkit extension. A module of its own, free of side
effects, so the build script never imports _torch_ops: on torch >= 2.4 that registers the custom-op fallback
under the same names, and loading the freshly built extension into that process would then abort on a duplicate
registration (run s8-3 on the H200)."""

import os

import torch

from . import _capi


def extension_dir(with_cuda):
    """Beside the flashkit library the extension links (build/lib -> build/torch_ext), one folder per torch version
    and CUDA flavour."""
    lib_dir = os.path.dirname(os.path.realpath(_capi.find_library_path()))
    tag = "torch-%s-%s" % (torch.__version__.replace("+", "_"), "cuda" if with_cuda else "cpu")
    return os.path.normpath(os.path.join(lib_dir, os.pardir, "torch_ext", tag))
