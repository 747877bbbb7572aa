"""ISA Mapper §2.1/§5: the instruction library and the ISA registry.

An :class:`Instruction` is an ISAMIR *needle* program plus a cost.  An
:class:`ISA` (a target) is a named set of instructions, each with
implementations keyed by backend (``"tvm"`` TensorIntrin, ``"c"``, ``"sim"``,
...), attached with :meth:`ISA.add` / :meth:`ISA.implement` by the code that
provides them.  Two ISAs ship:

* ``"x86"``: AVX-512 register-tile micro-kernels (fp32, 16 lanes):
  matmul 16x16x16 / 6x16xk / 8x32xk, dot, axpy, element-wise, reductions,
  16x16 transpose, a 16-wide 1-D convolution, zero fill.
* ``"accel"``: the paper's matrix-instruction accelerator (§5): 32x32x32 and
  16x16x16 matmul, 32x32 element-wise and bias units, row reductions,
  32x32 transpose, tile fill.

Costs are nominal cycle models: ``latency + points / throughput`` per call,
where *points* is the product of the needle's axis extents (multiply-adds for
a matmul).  Selection by call count (§2.4) does not use them; the cycle cost
model in :mod:`tensorize.selection` does.

>>> isa = get_isa("x86")
>>> print(isa["matmul_16x16x16"].needle)
forall i,j,k {
tmp[i][j][k] := A[i][k];
tmp[i][j][k] *= B[k][j];
C[i][j] += tmp[i][j][k];
}
>>> isa["matmul_6x16xk"].sizes
{'i': 6, 'j': 16, 'k': None}
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Mapping

from tvm_ext.errors import ConfigError

from .isamir import Program, parse_isamir

__all__ = [
    "Instruction",
    "ISA",
    "register_isa",
    "get_isa",
    "available_isas",
    "providers",
    "make_instruction",
    "x86_isa",
    "accel_isa",
]


@dataclass(frozen=True)
class Instruction:
    """A hardware (or library) instruction described as an ISAMIR needle.

    ``needle`` axes with extent ``None`` take any size (one call covers the
    whole haystack axis).  ``mnemonic`` is what mapped listings print
    (``matmul(...)``); ``name`` is unique within an ISA.
    """

    name: str
    mnemonic: str
    kind: str
    needle: Program
    latency: float = 1.0
    throughput: float = 0.0  # needle points per cycle; 0 = latency only
    targets: tuple[str, ...] = ()
    description: str = ""

    @property
    def sizes(self) -> dict[str, int | None]:
        """Needle axis -> extent (``None``: any size)."""
        return {a.name: a.extent for a in self.needle.axes}

    @property
    def flexible_axes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.needle.axes if a.extent is None)

    def call_cost(self, tile: Mapping[str, int] | None = None) -> float:
        """Modelled cycles of one call covering ``tile`` (needle axis -> extent).

        >>> get_isa("x86")["matmul_16x16x16"].call_cost()
        136.0
        """
        tile = dict(tile or {})
        points = 1
        for a, e in self.sizes.items():
            points *= int(tile.get(a, e) or 1)
        return float(self.latency + (points / self.throughput if self.throughput else 0.0))

    @property
    def cost(self) -> float:
        """Cost of one call at the nominal size (flexible axes counted as 1)."""
        return self.call_cost()

    def program_for(self, tile: Mapping[str, int] | None = None) -> Program:
        """The needle with flexible axes set to ``tile`` sizes."""
        tile = dict(tile or {})
        missing = [a for a in self.flexible_axes if a not in tile]
        if missing:
            raise ConfigError(f"instruction {self.name}: give sizes for flexible axes {missing}")
        return self.needle.instantiate(tile)

    def to_prim_func(self, tile: Mapping[str, int] | None = None):
        """The needle as a one-block PrimFunc (a TensorIntrin description body)."""
        from .exporters import to_prim_func

        return to_prim_func(self.program_for(tile), name=self.name)


def make_instruction(
    name: str,
    needle_text: str,
    *,
    mnemonic: str | None = None,
    kind: str = "other",
    sizes: Mapping[str, int | None] | None = None,
    latency: float = 1.0,
    throughput: float = 0.0,
    description: str = "",
) -> Instruction:
    """Build an instruction from its needle in listing syntax.

    >>> ins = make_instruction("add_4", "forall i { C[i] := A[i]; C[i] += B[i]; }", sizes={"i": 4})
    >>> ins.sizes, ins.mnemonic
    ({'i': 4}, 'add')
    """
    needle = parse_isamir(needle_text, extents=dict(sizes or {}), name=name)
    if not any(b.role == "output" for b in needle.buffers):
        raise ConfigError(f"instruction {name}: the needle writes no output buffer")
    return Instruction(
        name, mnemonic or name.split("_")[0], kind, needle, float(latency), float(throughput), (), description
    )


class ISA:
    """A target: named instructions, each with implementations keyed by backend.

    >>> isa = ISA("toy")
    >>> _ = isa.add(make_instruction("fill_8", "forall i { C[i] := 0; }", sizes={"i": 8}), impl="f")
    >>> isa.implementation("fill_8"), isa["fill_8"].targets
    ('f', ('toy',))
    """

    def __init__(self, name: str, description: str = ""):
        self.name = name
        self.description = description
        self._instructions: dict[str, Instruction] = {}
        self._impls: dict[str, dict[str, Any]] = {}

    def add(self, instruction: Instruction, impl: Any = None, *, backend: str = "tvm",
            replace_existing: bool = False) -> Instruction:
        """Add ``instruction`` (optionally with an implementation for ``backend``)."""
        if not isinstance(instruction, Instruction):
            raise ConfigError(f"ISA {self.name}: expected an Instruction, got {type(instruction).__name__}")
        if instruction.name in self._instructions and not replace_existing:
            raise ConfigError(f"ISA {self.name}: instruction {instruction.name!r} already exists")
        instruction.needle.validate()
        if self.name not in instruction.targets:
            instruction = replace(instruction, targets=instruction.targets + (self.name,))
        self._instructions[instruction.name] = instruction
        self._impls.setdefault(instruction.name, {})
        if impl is not None:
            self._impls[instruction.name][backend] = impl
        return instruction

    def implement(self, name: str, impl: Any, *, backend: str = "tvm") -> None:
        """Attach (or replace) the ``backend`` implementation of instruction ``name``."""
        self[name]  # raises for unknown names
        self._impls[name][backend] = impl

    def implementation(self, name: str, backend: str = "tvm") -> Any:
        """The implementation of ``name`` for ``backend`` (``None`` when not provided yet)."""
        self[name]
        return self._impls[name].get(backend)

    def backends(self, name: str) -> list[str]:
        self[name]
        return sorted(self._impls[name])

    def __getitem__(self, name: str) -> Instruction:
        try:
            return self._instructions[name]
        except KeyError:
            raise ConfigError(
                f"ISA {self.name}: no instruction {name!r} (have {sorted(self._instructions)})"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._instructions

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self._instructions.values())

    def __len__(self) -> int:
        return len(self._instructions)

    @property
    def names(self) -> list[str]:
        return list(self._instructions)

    def select(self, names: Iterable[str] | None = None, kinds: Iterable[str] | None = None) -> list[Instruction]:
        """Instructions filtered by name and/or kind (unknown names raise ConfigError)."""
        out = list(self)
        if names is not None:
            names = [names] if isinstance(names, str) else list(names)
            out = [self[n] for n in names]
        if kinds is not None:
            kinds = {kinds} if isinstance(kinds, str) else set(kinds)
            out = [i for i in out if i.kind in kinds]
        return out

    def __repr__(self) -> str:
        return f"ISA({self.name!r}, {len(self)} instructions)"


# --------------------------------------------------------------------------- library

_MATMUL = """forall i,j,k {
tmp[i][j][k] := A[i][k];
tmp[i][j][k] *= B[k][j];
C[i][j] += tmp[i][j][k];
}"""
_DOT = "forall k { tmp[k] := A[k]; tmp[k] *= B[k]; c += tmp[k]; }"
_AXPY = "forall i { tmp[i] := x[i]; tmp[i] *= a; y[i] += tmp[i]; }"
_CONV1D = "forall x,d { tmp[x][d] := A[x+d]; tmp[x][d] *= W[d]; C[x] += tmp[x][d]; }"
_BINARY = {"add": "+=", "sub": "-=", "mul": "*=", "max": "max=", "min": "min="}
_UNARY = ("exp", "tanh", "sigmoid")


def _binary(shape_axes: str, idx: str, op: str) -> str:
    return f"forall {shape_axes} {{ C{idx} := A{idx}; C{idx} {op} B{idx}; }}"


def _elementwise_set(suffix: str, axes: str, idx: str, sizes: dict, lat: float, thr: float,
                     thr_fn: float) -> list[Instruction]:
    """Element-wise instructions over one tile shape (``idx`` like ``[i]`` or ``[i][j]``)."""
    out = []
    for nm, op in _BINARY.items():
        out.append(make_instruction(f"{nm}_{suffix}", _binary(axes, idx, op), kind="elementwise",
                                    sizes=sizes, latency=lat, throughput=thr))
    for fn in _UNARY:
        out.append(make_instruction(f"{fn}_{suffix}", f"forall {axes} {{ C{idx} := {fn}(A{idx}); }}",
                                    kind="elementwise", sizes=sizes, latency=lat, throughput=thr_fn))
    more = {
        "relu": f"forall {axes} {{ C{idx} := A{idx}; C{idx} max= 0; }}",
        "scale": f"forall {axes} {{ C{idx} := A{idx}; C{idx} *= s; }}",
        "rsub": f"forall {axes} {{ C{idx} := s; C{idx} -= A{idx}; }}",
        "copy": f"forall {axes} {{ C{idx} := A{idx}; }}",
    }
    for nm, op in _BINARY.items():  # in-place forms: C op= A
        more[f"i{nm}"] = f"forall {axes} {{ C{idx} {op} A{idx}; }}"
    for nm, text in more.items():
        out.append(make_instruction(f"{nm}_{suffix}", text, kind="elementwise", sizes=sizes,
                                    latency=lat, throughput=thr))
    out.append(make_instruction(f"fill_{suffix}", f"forall {axes} {{ C{idx} := 0; }}", kind="fill",
                                sizes=sizes, latency=lat, throughput=2 * thr))
    return out


def x86_isa() -> ISA:
    """AVX-512 fp32 micro-kernels: 16 lanes, 2 FMA ports (32 multiply-adds per cycle)."""
    isa = ISA("x86", "AVX-512 fp32 register-tile micro-kernels (nominal cycle costs)")
    mm = [("16x16x16", {"i": 16, "j": 16, "k": 16}, 8.0), ("6x16xk", {"i": 6, "j": 16, "k": None}, 4.0),
          ("8x32xk", {"i": 8, "j": 32, "k": None}, 4.0)]
    for suffix, sizes, lat in mm:
        isa.add(make_instruction(f"matmul_{suffix}", _MATMUL, kind="matmul", sizes=sizes, latency=lat,
                                 throughput=32, description="C += A @ B register tile"))
    isa.add(make_instruction("dot_16", _DOT, kind="dot", sizes={"k": 16}, latency=6, throughput=32))
    isa.add(make_instruction("axpy_16", _AXPY, kind="axpy", sizes={"i": 16}, latency=1, throughput=32))
    isa.add(make_instruction("conv1d_16xk", _CONV1D, kind="conv1d", sizes={"x": 16, "d": None}, latency=4,
                             throughput=32, description="16 outputs of a 1-D convolution, any kernel width"))
    for ins in _elementwise_set("16", "i", "[i]", {"i": 16}, 1.0, 32.0, 2.0):
        isa.add(ins)
    isa.add(make_instruction("reduce_sum_16", "forall k { c += A[k]; }", kind="reduce", sizes={"k": 16},
                             latency=6, throughput=16))
    isa.add(make_instruction("reduce_max_16", "forall k { c max= A[k]; }", kind="reduce", sizes={"k": 16},
                             latency=6, throughput=16))
    isa.add(make_instruction("transpose_16x16", "forall i,j { B[j][i] := A[i][j]; }", kind="transpose",
                             sizes={"i": 16, "j": 16}, latency=16, throughput=16))
    return isa


def accel_isa() -> ISA:
    """The paper's §5 accelerator: matrix units, 32x32 element-wise and reduction units."""
    isa = ISA("accel", "matrix-instruction accelerator of ISA Mapper §5 (nominal cycle costs)")
    isa.add(make_instruction("matmul_32x32x32", _MATMUL, kind="matmul", sizes={"i": 32, "j": 32, "k": 32},
                             latency=16, throughput=1024))
    isa.add(make_instruction("matmul_16x16x16", _MATMUL, kind="matmul", sizes={"i": 16, "j": 16, "k": 16},
                             latency=16, throughput=256))
    tile = {"i": 32, "j": 32}
    for ins in _elementwise_set("32x32", "i,j", "[i][j]", tile, 4.0, 256.0, 64.0):
        isa.add(ins)
    isa.add(make_instruction("bias_add_32x32", "forall i,j { C[i][j] := A[i][j]; C[i][j] += b[j]; }",
                             mnemonic="bias_add", kind="elementwise", sizes=tile, latency=4, throughput=256))
    isa.add(make_instruction("ibias_add_32x32", "forall i,j { C[i][j] += b[j]; }", mnemonic="ibias_add",
                             kind="elementwise", sizes=tile, latency=4, throughput=256))
    isa.add(make_instruction("reduce_sum_32x32", "forall i,k { c[i] += A[i][k]; }", kind="reduce",
                             sizes={"i": 32, "k": 32}, latency=8, throughput=256))
    isa.add(make_instruction("reduce_max_32x32", "forall i,k { c[i] max= A[i][k]; }", kind="reduce",
                             sizes={"i": 32, "k": 32}, latency=8, throughput=256))
    isa.add(make_instruction("transpose_32x32", "forall i,j { B[j][i] := A[i][j]; }", kind="transpose",
                             sizes=tile, latency=8, throughput=128))
    return isa


# --------------------------------------------------------------------------- registry

_REGISTRY: dict[str, ISA] = {}
_BUILTIN = {"x86": x86_isa, "accel": accel_isa}


def register_isa(isa: ISA, *, replace_existing: bool = False) -> ISA:
    """Make ``isa`` available to :func:`get_isa` under ``isa.name``."""
    if not isinstance(isa, ISA):
        raise ConfigError(f"register_isa: expected an ISA, got {type(isa).__name__}")
    if isa.name in _REGISTRY and _REGISTRY[isa.name] is not isa and not replace_existing:
        raise ConfigError(f"register_isa: an ISA named {isa.name!r} is already registered")
    _REGISTRY[isa.name] = isa
    return isa


def get_isa(isa: "str | ISA") -> ISA:
    """Look up a registered ISA by name (the built-ins are created on first use).

    >>> get_isa("accel")["matmul_32x32x32"].sizes["k"]
    32
    """
    if isinstance(isa, ISA):
        return isa
    if isinstance(isa, str):
        if isa not in _REGISTRY and isa in _BUILTIN:
            _REGISTRY[isa] = _BUILTIN[isa]()
        if isa in _REGISTRY:
            return _REGISTRY[isa]
    raise ConfigError(f"unknown ISA {isa!r} (available: {available_isas()})")


def available_isas() -> list[str]:
    return sorted(set(_REGISTRY) | set(_BUILTIN))


def providers(instruction_name: str) -> list[str]:
    """Names of the ISAs that provide an instruction called ``instruction_name``."""
    return [n for n in available_isas() if instruction_name in get_isa(n)]
