# Type hints of flashkit._attention_fp8 (the implementation keeps its run-time checks; this file is for type checkers).
from typing import Any, Literal, Optional, Tuple, overload

import numpy as np

from ._attention import Cost
from ._bf16 import BF16Array

_Source = Any  # a numpy.ndarray (float32 / float16) or a BF16Array
_E4m3 = np.ndarray  # numpy.uint8 bytes of e4m3 values
_Impl = Literal["auto", "reference", "ref", "flash"]

def quantize_e4m3(x: _Source) -> Tuple[_E4m3, float]: ...
@overload
def attention_fp8(q: _E4m3, k: _E4m3, v: _E4m3, q_descale: float, k_descale: float, v_descale: float, *,
                  causal: bool = ..., scale: Optional[float] = ..., impl: _Impl = ..., check_finite: bool = ...,
                  return_cost: Literal[False] = ...) -> Tuple[BF16Array, np.ndarray]: ...
@overload
def attention_fp8(q: _E4m3, k: _E4m3, v: _E4m3, q_descale: float, k_descale: float, v_descale: float, *,
                  causal: bool = ..., scale: Optional[float] = ..., impl: _Impl = ..., check_finite: bool = ...,
                  return_cost: Literal[True]) -> Tuple[BF16Array, np.ndarray, Cost]: ...
