"""TIR executors for the sparse formats (Venkat 2016 inspector/executor).

``build_executor(fmt, n_cols, kind="spmm"|"spmv")`` compiles a TVM kernel made
for the format's representation and returns an :class:`Executor`
(``exe(B) -> A @ B``, ``exe(B, C, alpha=, beta=)``, ``exe.prim_func``,
``exe.time(B)``).  Each format module also exposes its PrimFunc generators
(``csr_spmm_primfunc(params, dtype)``...) and its params dataclass, the knobs
the autotuner varies.  Every format's executor is generated from its recipe
(``schedules.sparse.recipes``, bound to the container by
:class:`~schedules.sparse.recipes.container.ContainerKernels`); CSB's also gives
``A.T @ B`` and the symmetric-half product from the same store.  The fused GOGETA kernels apply a
row consumer to the CSR/BCSR recipe nest's row tiles in TIR
(:mod:`schedules.sparse.recipes.consumer`, ``FormatKernels.fused_primfunc``).

>>> sorted(registered_formats())
['bcsr', 'coo', 'csb', 'csr', 'dia', 'ell', 'hyb', 'sell']
"""
from schedules.sparse.executors.bcsr import (BCSRKernels, BCSRParams, bcsr_spmm_primfunc,
                                             bcsr_spmv_primfunc)
from schedules.sparse.executors.coo import COOKernels, COOParams, coo_spmm_primfunc, coo_spmv_primfunc
from schedules.sparse.executors.csb import CSBKernels, CSBParams, csb_spmm_primfunc, csb_spmv_primfunc
from schedules.sparse.executors.csr import CSRKernels, CSRParams, csr_spmm_primfunc, csr_spmv_primfunc
from schedules.sparse.executors.dia import DIAKernels, DIAParams, dia_spmm_primfunc, dia_spmv_primfunc
from schedules.sparse.executors.ell import ELLKernels, ELLParams, ell_spmm_primfunc, ell_spmv_primfunc
from schedules.sparse.executors.executor import (Executor, Timing, build_executor, kernels_for,
                                                 register_kernels, registered_formats)
from schedules.sparse.executors.hyb import HYBKernels, HYBParams, hyb_spmm_primfunc, hyb_spmv_primfunc
from schedules.sparse.executors.sell import (SELLKernels, SELLParams, sell_spmm_primfunc,
                                             sell_spmv_primfunc)
from schedules.sparse.executors.spec import ExecParams, FormatKernels

for _k in (CSRKernels(), COOKernels(), BCSRKernels(), ELLKernels(), DIAKernels(), CSBKernels(),
           HYBKernels(), SELLKernels()):
    register_kernels(_k)

#: Params dataclass of each format, by format name.
PARAMS = {"csr": CSRParams, "coo": COOParams, "bcsr": BCSRParams, "ell": ELLParams,
          "dia": DIAParams, "csb": CSBParams, "hyb": HYBParams, "sell": SELLParams}

__all__ = [
    "Executor", "Timing", "build_executor", "register_kernels", "kernels_for", "registered_formats",
    "ExecParams", "FormatKernels", "PARAMS",
    "CSRParams", "csr_spmm_primfunc", "csr_spmv_primfunc",
    "COOParams", "coo_spmm_primfunc", "coo_spmv_primfunc",
    "BCSRParams", "bcsr_spmm_primfunc", "bcsr_spmv_primfunc",
    "ELLParams", "ell_spmm_primfunc", "ell_spmv_primfunc",
    "DIAParams", "dia_spmm_primfunc", "dia_spmv_primfunc",
    "CSBParams", "csb_spmm_primfunc", "csb_spmv_primfunc",
    "HYBParams", "hyb_spmm_primfunc", "hyb_spmv_primfunc",
    "SELLParams", "sell_spmm_primfunc", "sell_spmv_primfunc",
]
