"""ISA Mapper §2.1: ISAMIR, the three-operand IR that describes kernels and instructions alike.

A :class:`Program` is a ``forall`` over loop axes holding a list of
three-operand :class:`Statement` s (``dst op= src``).  Every buffer access is
affine: one :class:`Affine` row per buffer dimension, i.e. an *access matrix*
with buffer dimensions on the rows and loop axes on the columns.  Each
statement runs over its whole domain (the axes it mentions) before the next
one starts; axes that appear in the source but not in the destination are
reduced by the statement's operator.

The text form is the paper's (Listing 4)::

    >>> p = parse_isamir('''
    ... forall i,j,k {
    ... tmp[i][j][k] := A[i][k];
    ... tmp[i][j][k] *= B[k][j];
    ... C[i][j] += tmp[i][j][k];
    ... }''', extents={"i": 4, "j": 3, "k": 2})
    >>> print(p)
    forall i,j,k {
    tmp[i][j][k] := A[i][k];
    tmp[i][j][k] *= B[k][j];
    C[i][j] += tmp[i][j][k];
    }
    >>> import numpy as np
    >>> a, b = np.ones((4, 2), "float32"), np.ones((2, 3), "float32")
    >>> float(evaluate(p, {"A": a, "B": b})["C"][0, 0])
    2.0

:func:`evaluate` is the reference semantics (a numpy interpreter): every
transformation in :mod:`tensorize.transforms` is checked against it.

The IR's classes are in :mod:`~tensorize.isamir.ir`, the text parser in
:mod:`~tensorize.isamir.parser`, the interpreter in :mod:`~tensorize.isamir.semantics`.
"""
from __future__ import annotations

from . import ir, parser, semantics
from .ir import (
    ASSOCIATIVE_OPS,
    FUNCTIONS,
    OPS,
    REDUCE_OPS,
    ZERO_PRESERVING,
    Access,
    Affine,
    Axis,
    Buffer,
    Const,
    Operand,
    Program,
    Statement,
    infer_shape,
)
from .parser import parse_isamir
from .semantics import collect_outputs, evaluate, prepare_arrays, run_statement, to_interface, to_internal

__all__ = [*ir.__all__, *parser.__all__, *semantics.__all__]
