"""Replace products with a constant, mostly-zero matrix by sparse kernels (``schedules/`` where they match).

Frontends densify sparse tensors: a GCN's adjacency arrives as a dense
``R.const`` operand of ``R.matmul``.  :func:`offload_sparse_matmuls` finds
every ``matmul`` whose left (or right) operand is a 2-D float32 constant with
density at most ``threshold`` and sends it to one of three places:

* ``"sextans"``: the product becomes ``call_tir(sextans_spmm, csr..., X)``
  (:mod:`tvm_ext.spmm_engine.relax_op`), which
  :func:`~tvm_ext.spmm_engine.partition_for_sextans` then offloads to the
  simulated HBM engine (when ``engine`` is configured);
* ``"gcn-fused"``: ``A @ (X @ W)`` with a single-use ``X @ W`` becomes the
  GOGETA-fused GCN layer kernel (:class:`schedules.fusion.gcn.GCNLayer`, which
  computes ``(A·X)·W`` in one pass over the rows) when re-associating does not
  multiply the sparse work by more than ``fuse_ratio``;
* ``"sparse-executor"``: otherwise the inspector/executor of
  :func:`schedules.sparse.inspect` (format chosen from the matrix) runs it on
  llvm.

The llvm kernels go into the module itself: the executor's (or fused layer's)
PrimFunc becomes a TIR function of the IRModule, called with ``R.call_tir``;
the format's arrays (row pointers, indices, values, row partition) are
``relax.const`` arguments and its scalars (alpha, beta, block grid) are bound
into the PrimFunc (:func:`embed_kernel`).  The model then builds into one
executable that exports like any other.  The PrimFuncs are marked
``tirx.is_scheduled`` so the llvm schedule rules leave them as generated.

A right operand ``X @ W`` with ``W`` sparse is computed as ``(Wᵀ @ Xᵀ)ᵀ``.

>>> import numpy as np
>>> from tvm import relax
>>> dense = np.eye(64, dtype="float32")
>>> csr = sparse_constant(relax.const(dense), threshold=0.1, min_elements=16)
>>> csr.nnz
64
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvm_ext.compile_steps.placement import ATTR_MEMBERS, op_id
from tvm_ext.errors import ScheduleError

__all__ = ["SparseRewrite", "sparse_constant", "offload_sparse_matmuls", "DEFAULT_THRESHOLD",
           "DEFAULT_MIN_ELEMENTS", "OPERAND_ATTR", "embed_kernel"]

#: PrimFunc attribute of an embedded sparse kernel: the digest of the constant matrix it was built for
#: (one kernel per matrix and plan, as the matrices' arrays are arguments).
OPERAND_ATTR = "tvm_ext.sparse_operand"

#: Density at or below which a constant matmul operand counts as sparse.
DEFAULT_THRESHOLD = 0.1
#: Smaller constants stay dense (a sparse kernel cannot pay off).
DEFAULT_MIN_ELEMENTS = 4096


@dataclass
class SparseRewrite:
    """One matmul (or GCN pair) replaced by a sparse kernel."""

    where: str  # "sparse-executor" | "sextans" | "gcn-fused"
    symbol: str
    shape: tuple[int, int]
    nnz: int
    n_cols: int
    detail: str
    ops: list[str] = field(default_factory=list)  # what it replaced, readable
    op_ids: list[int | None] = field(default_factory=list)  # placement.op_id of the replaced op calls
    kernel: Any = None  # the GlobalVar of the embedded TIR kernel (llvm placements)
    fallback: str = ""  # why a preferred placement was not used
    matrix: Any = None  # the sparse constant (CSR), kept for Sextans' tuning records
    op_names: list[str] = field(default_factory=lambda: ["matmul"])  # the Relax ops replaced, one per ``ops``

    @property
    def density(self) -> float:
        m, k = self.shape
        return self.nnz / max(m * k, 1)


def sparse_constant(expr: Any, threshold: float = DEFAULT_THRESHOLD,
                    min_elements: int = DEFAULT_MIN_ELEMENTS):
    """The scipy CSR of a 2-D float32 ``relax.Constant`` at most ``threshold`` dense, else None."""
    value = getattr(expr, "value", None)
    if not hasattr(value, "numpy") or not hasattr(expr, "ty"):
        return None
    arr = value.numpy()
    if arr.ndim != 2 or arr.dtype != np.float32 or arr.size < min_elements:
        return None
    nnz = int(np.count_nonzero(arr))
    if nnz > threshold * arr.size or not np.isfinite(arr).all():
        return None
    import scipy.sparse as sp

    return sp.csr_array(arr)


def _digest(csr, *extra: Any) -> str:
    h = hashlib.blake2b(digest_size=8)
    for a in (csr.indptr, csr.indices, csr.data, np.asarray(csr.shape)):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr(extra).encode())
    return h.hexdigest()


def _shape(expr: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in expr.ty.shape.values)
    except (AttributeError, TypeError, ValueError):
        return None


def _make_mutator():
    from tvm import relax
    from tvm.ir import Op

    @relax.expr_functor.mutator
    class _SparseMatmuls(relax.PyExprMutator):
        def __init__(self, mod, options: dict, uses: dict):
            super().__init__(mod)
            self.mod_, self.options, self.uses = mod, options, uses
            self.rewrites: list[SparseRewrite] = []
            self.spmm_gv = None

        def transform(self):
            for gv, func in self.mod_.functions.items():
                if isinstance(func, relax.Function) and "Codegen" not in (func.attrs or {}):
                    self.builder_.update_func(gv, self.visit_expr(func))
            return self.builder_.get()

        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            call = super().visit_call_(op)
            if not isinstance(call.op, Op) or call.op.name != "relax.matmul" or len(call.args) != 2:
                return call
            lhs, rhs = call.args
            o = self.options
            self._id = op_id(op)
            A = sparse_constant(lhs, o["threshold"], o["min_elements"])
            if A is not None and _shape(rhs) is not None and len(_shape(rhs)) == 2:
                return self._sparse_lhs(A, rhs)
            W = sparse_constant(rhs, o["threshold"], o["min_elements"])
            if W is not None and _shape(lhs) is not None and len(_shape(lhs)) == 2:
                import scipy.sparse as sp

                xt = self.builder_.emit(relax.op.permute_dims(lhs))
                zt = self._sparse_lhs(sp.csr_array(W.T), xt, transposed=True)
                return relax.op.permute_dims(self.builder_.emit(zt))
            return call

        # -- placements ------------------------------------------------------
        def _sparse_lhs(self, A, B, transposed: bool = False):
            o = self.options
            m, k = A.shape
            n = _shape(B)[1]
            label = f"matmul(const {m}x{k} at {A.nnz / (m * k):.2%} density, {'Xᵀ' if transposed else 'X'} {k}x{n})"
            if o["engine"] is not None:
                return self._sextans(A, B, label)
            fused = None if transposed else self._gcn_fused(A, B, label)
            if fused is not None:
                return fused
            return self._executor(A, B, label)

        def _executor(self, A, B, label, fallback: str = ""):
            from schedules.sparse import inspect
            from schedules.sparse.executors import kernels_for
            from tvm_ext.target import num_threads

            n = _shape(B)[1]
            plan = inspect(A, n)
            fmt, target = plan.format, self.options["target"]
            kernels = kernels_for(fmt)
            kernels.check(fmt)
            params = kernels.resolve(fmt, kernels.params_cls(), "float32", "spmm", n, target)
            func = kernels.primfunc(fmt, params, "spmm", False)
            arrays = kernels.arrays(fmt, params, "spmm", False, num_threads())
            scalars = [int(v) for v in kernels.scalars(fmt, False)]
            # (*format arrays, *partition arrays, B, C_in, C_out, *scalars, alpha, beta); beta = 0,
            # so C_in is C_out (the executor's contract allows it)
            n_arr = len(arrays)
            roles = ([("const", a) for a in arrays] + [("input", B), ("same", n_arr + 2),
                                                        ("output", (A.shape[0], n))]
                     + [("value", v) for v in scalars] + [("value", 1.0), ("value", 0.0)])
            digest = _digest(A, plan.label, n)
            out, gv = self._embed(func, roles, f"sparse_{fmt.name}", digest, ["matmul"])
            self.rewrites.append(SparseRewrite("sparse-executor", gv.name_hint, A.shape, int(A.nnz), n,
                                               f"{plan.label} executor ({plan.choice.reason})", [label],
                                               [self._id], gv, fallback))
            return out

        def _embed(self, func, roles, name: str, digest: str, members: list[str]):
            """``call_tir`` of ``func`` added to the module (see :func:`embed_kernel`); (call, GlobalVar)."""
            prim, args, out_ty = embed_kernel(func, roles)
            prim = prim.with_attr(OPERAND_ATTR, digest).with_attr(ATTR_MEMBERS, members)
            gv = self.builder_.add_func(prim, name)
            return relax.call_tir(gv, args, out_ty=out_ty), gv

        def _sextans(self, A, B, label):
            from tvm_ext.spmm_engine.relax_op import SPMM_FUNC, spmm_primfunc

            if self.spmm_gv is None:
                self.spmm_gv = self.builder_.add_func(spmm_primfunc().without_attr("global_symbol"), SPMM_FUNC)
            csr = [relax.const(A.indptr.astype(np.int32)), relax.const(A.indices.astype(np.int32)),
                   relax.const(A.data.astype(np.float32))]
            n = _shape(B)[1]
            self.rewrites.append(SparseRewrite("sextans", "", A.shape, int(A.nnz), n,
                                               f"Sextans engine ({self.options['engine_name']})", [label],
                                               [self._id], matrix=A))
            return relax.call_tir(self.spmm_gv, [*csr, B], out_ty=relax.TensorType((A.shape[0], n), "float32"))

        def _gcn_fused(self, A, B, label):
            o = self.options
            if not o["fuse_gcn"] or not isinstance(B, relax.Var) or self.uses.get(B, 0) != 1:
                return None
            inner = self.lookup_binding(B)
            if not (isinstance(inner, relax.Call) and isinstance(inner.op, Op)
                    and inner.op.name == "relax.matmul"):
                return None
            X, W = inner.args
            xs, ws = _shape(X), _shape(W)
            if xs is None or ws is None or len(xs) != 2 or len(ws) != 2 or xs[0] != A.shape[1]:
                return None
            if xs[1] > o["fuse_ratio"] * ws[1]:
                return None
            try:
                from schedules.fusion.gcn import GCNLayer

                layer = GCNLayer(A, xs[1], ws[1], fused=True, target=o["target"])
            except Exception as e:  # noqa: BLE001 - the fused kernel is optional: fall back, say why
                reason = f"fused GCN kernel unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
                return self._executor(A, B, label, fallback=reason)
            roles = _layer_roles(layer, X, W)
            if roles is None:
                return self._executor(A, B, label, fallback=f"the fused GCN layer has {len(layer.kernels)} steps; "
                                                            "only a one-kernel layer joins the module")
            inner_label = f"matmul(X {xs[0]}x{xs[1]}, W {ws[0]}x{ws[1]})"
            out, gv = self._embed(layer.kernels[0].prim_func, roles, "gcn_fused_layer", _digest(A, xs, ws),
                                  ["matmul", "matmul"])
            self.rewrites.append(SparseRewrite(
                "gcn-fused", gv.name_hint, A.shape, int(A.nnz), ws[1],
                f"GOGETA-fused GCN layer (A·X)·W, steps {layer.steps}", [inner_label, label],
                [op_id(inner), self._id], gv, op_names=["matmul", "matmul"]))
            return out

    return _SparseMatmuls


def embed_kernel(func: Any, roles: list[tuple[str, Any]]) -> tuple[Any, list, Any]:
    """``func`` made callable by ``R.call_tir``: its parameters bound or reordered by ``roles``.

    One role per parameter of ``func``, in order:

    * ``("const", ndarray)``: an argument known at compile time (a ``relax.const``);
    * ``("input", relax expr)``: an argument of the call;
    * ``("output", shape)``: a float32 output the VM allocates (outputs follow the inputs);
    * ``("same", j)``: the same buffer as parameter ``j`` (bound with ``specialize``);
    * ``("value", number)``: a scalar bound into the function.

    Returns the PrimFunc (``tirx.is_scheduled``, no global symbol), the call's arguments and its
    output type.

    >>> import numpy as np
    >>> from tvm.script import tirx as T
    >>> from tvm import relax
    >>> @T.prim_func(s_tir=True)
    ... def scale(a: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32"), s: T.float32):
    ...     for i in range(4):
    ...         with T.sblock("y"):
    ...             vi = T.axis.spatial(4, i)
    ...             y[vi] = a[vi] * s
    >>> f, args, ty = embed_kernel(scale, [("const", np.ones(4, "float32")), ("output", (4,)), ("value", 2.0)])
    >>> [p.name for p in f.params], len(args), bool(f.attrs["tirx.is_scheduled"])
    (['a', 'y'], 1, True)
    """
    import tvm
    from tvm import relax

    params = list(func.params)
    if len(roles) != len(params):
        raise ScheduleError(f"embed_kernel: {len(roles)} roles for {len(params)} parameters")
    binds = {}
    for p, (kind, v) in zip(params, roles):
        if kind == "value":
            binds[p] = tvm.tirx.const(v, str(p.ty.dtype))
        elif kind == "same":
            binds[p] = params[v]
    if binds:
        func = func.specialize(binds)
    kept = [r for r in roles if r[0] not in ("value", "same")]
    new_params = list(func.params)
    if len(new_params) != len(kept):
        raise ScheduleError("embed_kernel: specialize kept an unexpected parameter list")
    ins = [(p, r) for p, r in zip(new_params, kept) if r[0] in ("const", "input")]
    outs = [(p, r) for p, r in zip(new_params, kept) if r[0] == "output"]
    func = tvm.tirx.PrimFunc([p for p, _ in ins] + [p for p, _ in outs], func.body, func.ret_type, func.attrs)
    func = func.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
    args = [relax.const(np.ascontiguousarray(v)) if kind == "const" else v for _, (kind, v) in ins]
    tys = [relax.TensorType(tuple(int(d) for d in shape), "float32") for _, (_, shape) in outs]
    return func, args, tys[0] if len(tys) == 1 else tys


def _layer_roles(layer: Any, X: Any, W: Any) -> list[tuple[str, Any]] | None:
    """Roles (:func:`embed_kernel`) of a one-kernel fused GCN layer's PrimFunc, else None.

    The kernel's own arguments (``GroupKernel.args``) are its format and part arrays (constants),
    the environment's tensors ``X0``/``W`` (inputs) and ``X1`` (the output), and its scalars."""
    import tvm

    kernels = [k for k in layer.kernels if k is not None]
    st = layer.storage
    if len(kernels) != 1 or len(layer.kernels) != 1:
        return None
    (kernel,) = kernels
    tensors = {st["X0"]: ("input", X), st["W"]: ("input", W), st["X1"]: ("output", (layer.n, layer.n_out))}
    if len(tensors) != 3 or set(kernel.storage) != set(tensors):
        return None
    roles = []
    for a in kernel.args({name: name for name in tensors}):
        if isinstance(a, str):
            roles.append(tensors[a])
        elif isinstance(a, tvm.runtime.Tensor):
            roles.append(("const", a.numpy()))
        else:
            roles.append(("value", a))
    if [r[0] for r in roles].count("output") != 1:
        return None
    return roles


def _use_counts(mod: Any) -> dict:
    """How often each Relax var is used as an argument, over every Relax function."""
    from tvm import relax

    counts: dict = {}

    def visit(e):
        if isinstance(e, relax.Call):
            for a in e.args:
                if isinstance(a, relax.Var):
                    counts[a] = counts.get(a, 0) + 1
        elif isinstance(e, relax.Tuple):
            for a in e.fields:
                if isinstance(a, relax.Var):
                    counts[a] = counts.get(a, 0) + 1

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
            body = func.body
            if isinstance(getattr(body, "body", None), relax.Var):
                counts[body.body] = counts.get(body.body, 0) + 1
    return counts


def offload_sparse_matmuls(mod: Any, *, target: Any = None, engine: Any = None, engine_name: str = "",
                           threshold: float = DEFAULT_THRESHOLD, min_elements: int = DEFAULT_MIN_ELEMENTS,
                           fuse_gcn: bool = True, fuse_ratio: float = 4.0
                           ) -> tuple[Any, list[SparseRewrite]]:
    """Rewrite the sparse-constant matmuls of ``mod``.

    Returns the module (the llvm kernels added to it as TIR functions) and what was done.
    ``engine`` is anything true to send the products to Sextans (the caller runs
    :func:`~tvm_ext.spmm_engine.partition_for_sextans` afterwards).
    """
    from tvm import relax

    options = {"target": target, "engine": engine, "engine_name": engine_name, "threshold": float(threshold),
               "min_elements": int(min_elements), "fuse_gcn": bool(fuse_gcn), "fuse_ratio": float(fuse_ratio)}
    mutator = _make_mutator()(mod, options, _use_counts(mod))
    new = mutator.transform()
    if mutator.rewrites:
        new = relax.transform.DeadCodeElimination()(new)
    return new, mutator.rewrites
