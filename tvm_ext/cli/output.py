"""What a CLI command returns: a JSON-able dict plus its human rendering.

``table`` (re-exported from :mod:`tvm_ext.markdown`) renders markdown tables.

>>> out = Output({"rows": 3}, "rows: 3")
>>> out.data["rows"], out.text
(3, 'rows: 3')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm_ext.markdown import table

__all__ = ["Output", "table", "EXIT_RESULT_FAILED"]

#: Exit status of a command that ran but whose result failed a check it reports (e.g. no convergence).
EXIT_RESULT_FAILED = 3


@dataclass
class Output:
    """``data`` is printed with ``--json``; ``text`` otherwise.

    ``exit_code`` is the process's exit status after printing: 0, or
    :data:`EXIT_RESULT_FAILED` (3) when the command ran but its
    result failed a check the output reports (a solver that did not converge).
    """

    data: dict[str, Any]
    text: str = ""
    exit_code: int = 0
