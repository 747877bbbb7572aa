"""schedules: how to run a kernel well on the CPU through TVM.

Subpackages:

* :mod:`schedules.sparse` - inspector/executor sparse formats, level sets, solvers.
* :mod:`schedules.fusion` - GOGETA's einsum DAG analyses, traffic model, fused kernels.
"""
__all__: list[str] = []
