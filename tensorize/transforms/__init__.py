"""ISA Mapper §2.3: IR transformations on ISAMIR, each a pass behind one interface.

A :class:`Transform` has ``apply(program, **params) -> Program`` (raising
:class:`TransformError` when the rewrite would not preserve the program's
meaning) and ``propose(program, result, instruction)``, which reads the
deterministic mapper's feedback (:class:`~tensorize.mapper.MapResult`) and
returns the concrete :class:`TransformStep` s likely to repair it.  New passes
subclass :class:`Transform` and call :func:`register_transform`.

Shipped passes:

* ``factorization``: move a factor out of a sum (distributivity), e.g.
  Listing 3's separable convolution becomes a depthwise sum and a matmul;
* ``commutativity``: swap two operands of a ``*=``/``+=``/``max=`` chain;
* ``associativity``: regroup a chain's tail into its own temporary;
* ``transpose``: permute a buffer's dimensions (layout change);
* ``split`` / ``fuse`` / ``pad``: make an axis fit an instruction size;
* ``insert_unit_dim``: add a size-1 axis and dimension to some buffers.

Every pass keeps the kernel's interface: buffers whose layout changes record
it in ``Buffer.layout`` (see :func:`tensorize.isamir.evaluate`).

>>> from tensorize.isamir import parse_isamir, evaluate
>>> p = parse_isamir('''forall i:2,j:2,k:3 { C[i][j] := 0; tmp[i][j][k] := s; tmp[i][j][k] *= A[i][k];
...   tmp[i][j][k] *= B[k][j]; C[i][j] += tmp[i][j][k]; }''')
>>> q = apply_steps(p, [TransformStep("factorization", (("stmt", 4), ("operand", 0)))])
>>> print(q)
forall i,j,k {
C[i][j] := 0;
tmp2[i][j] := 0;
tmp1[i][j][k] := A[i][k];
tmp1[i][j][k] *= B[k][j];
tmp2[i][j] += tmp1[i][j][k];
tmp3[i][j] := tmp2[i][j];
tmp3[i][j] *= s;
C[i][j] += tmp3[i][j];
}
"""
from __future__ import annotations

from .algebra import Associativity, Commutativity, Factorization
from .base import (
    Transform,
    TransformError,
    TransformStep,
    apply_steps,
    available_transforms,
    get_transform,
    register_transform,
)
from .common import Chain, find_chains
from .layout import Fuse, InsertUnitDim, Split, Transpose
from .pad import Pad

__all__ = [
    "TransformError",
    "TransformStep",
    "Transform",
    "Chain",
    "find_chains",
    "register_transform",
    "get_transform",
    "available_transforms",
    "apply_steps",
    "Factorization",
    "Commutativity",
    "Associativity",
    "Transpose",
    "Split",
    "Fuse",
    "Pad",
    "InsertUnitDim",
]

for _t in (Factorization(), Commutativity(), Associativity(), Transpose(), Split(), Fuse(), Pad(), InsertUnitDim()):
    register_transform(_t)
