# Type hints of flashkit._attention (the implementation keeps its run-time checks; this file is for type checkers).
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence, Tuple, Union, overload

from ._bf16 import BF16Array

_Array = Any  # a numpy.ndarray (float32 / float16 / float64) or a BF16Array
_Window = Union[int, Tuple[int, int], Sequence[int]]
_Impl = Literal["auto", "reference", "ref", "standard", "std", "flash"]

@dataclass(frozen=True)
class Cost:
    flops: float
    bytes_read: float
    bytes_written: float
    workspace_bytes: float
    model: str
    kernel: str
    @property
    def total_bytes(self) -> float: ...

@overload
def attention(q: _Array, k: _Array, v: _Array, *, causal: bool = ..., window: _Window = ..., softcap: float = ...,
              scale: Optional[float] = ..., impl: _Impl = ..., cu_seqlens_q: Optional[Sequence[int]] = ...,
              cu_seqlens_k: Optional[Sequence[int]] = ..., check_finite: bool = ...,
              return_cost: Literal[False] = ...) -> Tuple[_Array, _Array]: ...
@overload
def attention(q: _Array, k: _Array, v: _Array, *, causal: bool = ..., window: _Window = ..., softcap: float = ...,
              scale: Optional[float] = ..., impl: _Impl = ..., cu_seqlens_q: Optional[Sequence[int]] = ...,
              cu_seqlens_k: Optional[Sequence[int]] = ..., check_finite: bool = ...,
              return_cost: Literal[True]) -> Tuple[_Array, _Array, Cost]: ...
@overload
def attention_backward(dout: _Array, q: _Array, k: _Array, v: _Array, o: _Array, lse: _Array, *, causal: bool = ...,
                       window: _Window = ..., softcap: float = ..., scale: Optional[float] = ..., impl: _Impl = ...,
                       cu_seqlens_q: Optional[Sequence[int]] = ..., cu_seqlens_k: Optional[Sequence[int]] = ...,
                       check_finite: bool = ..., return_cost: Literal[False] = ...) -> Tuple[_Array, _Array, _Array]: ...
@overload
def attention_backward(dout: _Array, q: _Array, k: _Array, v: _Array, o: _Array, lse: _Array, *, causal: bool = ...,
                       window: _Window = ..., softcap: float = ..., scale: Optional[float] = ..., impl: _Impl = ...,
                       cu_seqlens_q: Optional[Sequence[int]] = ..., cu_seqlens_k: Optional[Sequence[int]] = ...,
                       check_finite: bool = ...,
                       return_cost: Literal[True]) -> Tuple[_Array, _Array, _Array, Cost]: ...
