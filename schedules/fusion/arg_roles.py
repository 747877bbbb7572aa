"""What each parameter of a generated step kernel is, as typed metadata.

A :class:`~schedules.fusion.kernels.GroupKernel` lists one :class:`ArgRole`
per PrimFunc parameter (``GroupKernel.arg_roles``).  Code that rebuilds a
kernel's arguments (tuning with another row-part count, checking a tuned
kernel's outputs) reads these roles, never the buffer names.

>>> from schedules.fusion.arg_roles import ArgRole
>>> ArgRole.WORKSPACE.sized_by_parts, ArgRole.TENSOR.sized_by_parts
(True, False)
"""
from __future__ import annotations

import enum

__all__ = ["ArgRole"]


class ArgRole(enum.Enum):
    """The role of one step-kernel parameter."""

    #: a sparse-format array of the executor (row pointers, column indices, values)
    FORMAT = "format"
    #: the row-part boundaries of the parallel loop (int32, one more entry than parts)
    PARTS = "parts"
    #: a per-part partial-sum workspace: one leading slot per entry of the PARTS array
    WORKSPACE = "workspace"
    #: a tensor of the solver's environment, read or written by the step
    TENSOR = "tensor"
    #: a scalar argument (block grid, alpha, beta)
    SCALAR = "scalar"
    #: a one-entry int32 flag the kernel sets for its caller (a failed in-kernel solve)
    STATUS = "status"

    @property
    def sized_by_parts(self) -> bool:
        """True if the argument's leading extent follows the number of row parts."""
        return self in (ArgRole.PARTS, ArgRole.WORKSPACE)
