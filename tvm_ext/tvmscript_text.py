"""TVMScript source text built from Python, and its parser: the one builder every generator uses.

The sparse executors, the fused kernels and tensorize's TensorIntrins are written
as TVMScript *source text* (tuning knobs become literal constants, sizes stay
symbolic).  :class:`Code` is the indentation-aware line builder they write it
with, and :func:`parse_prim_func` turns the text into a ``tvm.tirx.PrimFunc``.
Text that does not parse is a bug in its generator: :class:`~tvm_ext.errors.CodegenError`
carries the parser's message and the numbered text.

>>> code = Code()
>>> with code.block("for i in range(4):"):
...     code("pass")
>>> print(code.text())
for i in range(4):
    pass
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from tvm_ext.errors import CodegenError

__all__ = ["Code", "parse_prim_func"]

INDENT = "    "


class Code:
    """Lines of Python/TVMScript with an indentation level.

    >>> body = Code()
    >>> body("x = 1")
    >>> outer = Code()
    >>> with outer.block("def f():"):
    ...     outer.extend(body)
    >>> outer.lines
    ['def f():', '    x = 1']
    """

    def __init__(self, level: int = 0):
        self.lines: list[str] = []
        self.level = level

    def __call__(self, line: str) -> None:
        self.lines.append(INDENT * self.level + line)

    @contextmanager
    def block(self, header: str | None) -> Iterator[None]:
        """Emit ``header`` and indent the body; ``None`` emits nothing."""
        if header is None:
            yield
            return
        self(header)
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def extend(self, other: "Code") -> None:
        """Append ``other``'s lines, indented by this builder's current level."""
        self.lines.extend(INDENT * self.level + line for line in other.lines)

    def text(self) -> str:
        return "\n".join(self.lines)


def parse_prim_func(source: str, extra_vars: dict[str, Any] | None = None) -> Any:
    """Parse generated TVMScript into a PrimFunc; :class:`CodegenError` shows the numbered text
    when it does not parse (a bug in the generator, not in user input).

    >>> f = parse_prim_func('''
    ... @T.prim_func(s_tir=True)
    ... def f(a: T.Buffer((4,), "float32")):
    ...     for i in range(4):
    ...         a[i] = T.float32(0)
    ... ''')
    >>> type(f).__name__
    'PrimFunc'
    """
    from tvm.script import from_source

    try:
        return from_source(source, extra_vars=extra_vars)
    except Exception as exc:  # noqa: BLE001 - any parser failure means the generator wrote bad text
        numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(source.splitlines()))
        raise CodegenError(f"generated TVMScript does not parse: {exc}\n{numbered}") from exc
