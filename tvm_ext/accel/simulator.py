"""The simulator runtime: executes an instruction stream functionally (numpy) and times it.

Every slot of every memory is a float32 array; home copies are the tensors
themselves.  A copy moves a piece (gathering a strided, possibly transposed
region out of its tensor, zero-filling what lies outside it); a compute
instruction runs the instruction's ``"sim"`` implementation on its operand
tiles, then zeroes the part of each written tile that lies outside its
tensor.  The implementations are attached to the ``tensorize`` ISA under the
``"sim"`` backend (:func:`register_sim_implementations`); an instruction
without one runs through :func:`tensorize.isamir.evaluate` (slow, exact).

Streams are compiled once into closures (pre-bound numpy views), so running
the recursive stream of a recurrent schedule again costs only the numpy work.

:func:`simulate` = functional run + timed model (:mod:`~tvm_ext.accel.timing`).

>>> import numpy as np
>>> from tvm_ext.accel.workload import Workload
>>> from tvm_ext.accel.scheduler import schedule
>>> wl = Workload(); y = wl.matmul(wl.input("a", (40, 70)), wl.weight("b", (70, 20)), out="y")
>>> ins = wl.random_inputs(seed=1)
>>> res = simulate(schedule(wl), ins)
>>> bool(np.allclose(res.outputs["y"], ins["a"] @ ins["b"], atol=1e-5)), res.timing.cycles > 0
(True, True)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from tvm_ext.errors import InputError

from .stream import COMPUTE, COPY, HOME, InstructionStream
from .timing import Timeline, TimingReport

__all__ = ["FunctionalSimulator", "SimulationResult", "simulate", "register_sim_implementations", "SIM_IMPLS"]


# --------------------------------------------------------------------------- instruction semantics


def _sigmoid(A, C):
    def f():
        np.negative(A, out=C)
        np.exp(C, out=C)
        np.add(C, 1.0, out=C)
        np.reciprocal(C, out=C)
    return f


def _binary(ufunc):
    return lambda a, c: (lambda A=a["A"], B=a["B"], C=a["C"]: ufunc(A, B, out=C))


def _inplace(ufunc):
    return lambda a, c: (lambda A=a["A"], C=a["C"]: ufunc(C, A, out=C))


def _scalar(a, c):
    """The scalar operand ``s``: a mapped constant, or a one-element tile of a tensor (read at run time)."""
    return a["s"] if "s" in a else np.float32(c["s"])


#: mnemonic-level implementations: ``factory(arrays: {needle buffer: tile}, constants) -> run()``.
SIM_IMPLS: dict[str, Callable[[dict, dict], Callable[[], None]]] = {
    "matmul": lambda a, c: (lambda A=a["A"], B=a["B"], C=a["C"]: np.add(C, A @ B, out=C)),
    "fill": lambda a, c: (lambda C=a["C"]: C.fill(0.0)),
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "exp": lambda a, c: (lambda A=a["A"], C=a["C"]: np.exp(A, out=C)),
    "tanh": lambda a, c: (lambda A=a["A"], C=a["C"]: np.tanh(A, out=C)),
    "sigmoid": lambda a, c: _sigmoid(a["A"], a["C"]),
    "relu": lambda a, c: (lambda A=a["A"], C=a["C"]: np.maximum(A, 0.0, out=C)),
    "scale": lambda a, c: (lambda A=a["A"], C=a["C"], s=_scalar(a, c): np.multiply(A, s, out=C)),
    "rsub": lambda a, c: (lambda A=a["A"], C=a["C"], s=_scalar(a, c): np.subtract(s, A, out=C)),
    "copy": lambda a, c: (lambda A=a["A"], C=a["C"]: np.copyto(C, A)),
    "iadd": _inplace(np.add),
    "isub": _inplace(np.subtract),
    "imul": _inplace(np.multiply),
    "imax": _inplace(np.maximum),
    "imin": _inplace(np.minimum),
    "bias_add": lambda a, c: (lambda A=a["A"], b=a["b"], C=a["C"]: np.add(A, b, out=C)),
    "ibias_add": lambda a, c: (lambda b=a["b"], C=a["C"]: np.add(C, b, out=C)),
    "reduce_sum": lambda a, c: (lambda A=a["A"], C=a["c"]: np.add(C, A.sum(axis=1), out=C)),
    "reduce_max": lambda a, c: (lambda A=a["A"], C=a["c"]: np.maximum(C, A.max(axis=1), out=C)),
    "transpose": lambda a, c: (lambda A=a["A"], B=a["B"]: np.copyto(B, A.T)),
}


def register_sim_implementations(isa_name: str = "accel") -> int:
    """Attach :data:`SIM_IMPLS` to every instruction of the ISA with a matching mnemonic; returns how many."""
    from tensorize.instructions import get_isa  # the submodule: tensorize may still be initialising

    isa = get_isa(isa_name)
    n = 0
    for ins in isa:
        base = ins.name.split("_")[0] if ins.mnemonic not in SIM_IMPLS else ins.mnemonic
        if base in SIM_IMPLS and isa.implementation(ins.name, "sim") is None:
            isa.implement(ins.name, SIM_IMPLS[base], backend="sim")
            n += 1
    return n


def _generic(instruction, tile: dict) -> Callable[[dict, dict], Callable[[], None]]:
    """Fallback: evaluate the needle with the ISAMIR interpreter."""
    from tensorize.isamir import evaluate

    needle = instruction.program_for(tile)
    outs = [b.name for b in needle.buffers if b.role == "output"]

    def factory(arrays, consts):
        def run():
            feeds = {k: v for k, v in arrays.items()}
            feeds.update({k: np.float32(v) for k, v in consts.items()})
            res = evaluate(needle, feeds)
            for o in outs:
                np.copyto(arrays[o], res[o])
        return run
    return factory


# --------------------------------------------------------------------------- the functional runtime


class FunctionalSimulator:
    """Executes streams of one schedule on numpy data (slots + tensors)."""

    def __init__(self, schedule: Any):
        from tensorize.instructions import get_isa

        self.schedule = schedule
        self.pieces = schedule.tiles.pieces
        self.calls = schedule.tiles.calls
        self.isa = get_isa(schedule.system.isa)
        register_sim_implementations(schedule.system.isa)
        wl = schedule.workload
        self.tensors = {n: np.zeros(wl.tensors[n].shape, dtype=np.float32) for n in self.pieces.tensor_names}
        self._slots: dict[int, np.ndarray] = {}
        self._views: dict[tuple, np.ndarray] = {}
        self._compiled: dict[int, tuple[InstructionStream, int, list]] = {}
        self._factories: dict[int, Callable] = {}
        self.executed = 0

    # -- data ----------------------------------------------------------------------
    def load(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Copy the caller's arrays into their tensors' home copies (in place)."""
        checked = self.schedule.workload.check_inputs(inputs)
        for n, a in checked.items():
            np.copyto(self.tensors[n], a)

    def set_tensor(self, name: str, value: np.ndarray) -> None:
        """Overwrite a tensor's home copy (a driver writing the next step's input)."""
        t = self.tensors.get(name)
        if t is None:
            raise InputError(f"no tensor {name!r}")
        np.copyto(t, value)

    def outputs(self) -> dict[str, np.ndarray]:
        return {n: self.tensors[n].copy() for n in self.schedule.workload.outputs}

    def _tile(self, slot: int, piece: int) -> np.ndarray:
        shape = self.pieces.shape[piece]
        key = (slot, shape)
        v = self._views.get(key)
        if v is None:
            flat = self._slots.get(slot)
            nbytes = self.schedule.stream.slot_bytes[slot]
            if flat is None:
                flat = self._slots[slot] = np.zeros(nbytes // 4, dtype=np.float32)
            v = self._views[key] = flat[: int(np.prod(shape))].reshape(shape)
        return v

    # -- compilation ---------------------------------------------------------------
    def _copy(self, p: int, src: int, dst: int) -> Callable[[], None]:
        P = self.pieces
        tensor = self.tensors[P.tensor_names[P.tensor[p]]]
        empty = P.valid_bytes[p] == 0
        if src == HOME and dst == HOME:
            raise InputError("internal: home-to-home copy")
        if src != HOME and dst != HOME:
            a, b = self._tile(src, p), self._tile(dst, p)
            return lambda a=a, b=b: np.copyto(b, a)
        if dst != HOME:
            tile = self._tile(dst, p)
            if empty:
                return lambda tile=tile: tile.fill(0.0)
            block = tensor[P.home_index[p]].transpose(P.axes[p])
            vshape, valid = P.valid_shape[p], P.tile_valid[p]
            target = tile[tuple(valid) + (Ellipsis,)]  # a view, also of a 0-d (scalar) tile
            if P.partial[p]:
                def load(tile=tile, target=target, block=block, vshape=vshape):
                    tile.fill(0.0)
                    target[...] = block.reshape(vshape)
                return load
            return lambda target=target, block=block, vshape=vshape: np.copyto(target, block.reshape(vshape))
        tile = self._tile(src, p)
        if empty:
            return lambda: None
        block = tensor[P.home_index[p]].transpose(P.axes[p])
        valid = tile[tuple(P.tile_valid[p]) + (Ellipsis,)]
        bshape = block.shape
        return lambda block=block, valid=valid, bshape=bshape: np.copyto(block, valid.reshape(bshape))

    def _factory(self, call: int) -> Callable:
        f = self._factories.get(call)
        if f is None:
            c = self.calls[call]
            f = self.isa.implementation(c.instruction.name, "sim") or _generic(c.instruction, c.mapping.tile)
            self._factories[call] = f
        return f

    def _compute(self, stream: InstructionStream, i: int) -> Callable[[], None]:
        call = stream.arg[i]
        c = self.calls[call]
        arrays, zero = {}, []
        for spec, (slot, p) in zip(c.operands, stream.operands(i)):
            tile = self._tile(slot, p)
            arrays[spec.needle] = tile
            if spec.mode != "r" and self.pieces.partial[p]:
                zero.append((tile, _outside(self.pieces, p)))
        run = self._factory(call)(arrays, c.constants)
        if not zero:
            return run

        def masked(run=run, zero=zero):
            run()
            for tile, regions in zero:
                for r in regions:
                    tile[r] = 0.0
        return masked

    def compile(self, stream: InstructionStream) -> list[Callable[[], None]]:
        """Closures for every instruction of ``stream`` (cached)."""
        hit = self._compiled.get(id(stream))
        if hit is not None and hit[0] is stream and hit[1] == len(stream):
            return hit[2]
        code = []
        for i, k in enumerate(stream.kind):
            if k == COMPUTE:
                code.append(self._compute(stream, i))
            elif k == COPY:
                code.append(self._copy(stream.piece[i], stream.src[i], stream.dst[i]))
        self._compiled[id(stream)] = (stream, len(stream), code)
        return code

    def run(self, stream: InstructionStream) -> None:
        """Execute ``stream`` on the current data."""
        code = self.compile(stream)
        for f in code:
            f()
        self.executed += len(code)


def _outside(P, p: int) -> list[tuple]:
    """Slices covering the part of piece ``p``'s tile outside its tensor."""
    shape = P.shape[p]
    if P.valid_bytes[p] == 0:
        return [tuple(slice(None) for _ in shape)]
    out = []
    for d, (sl, n) in enumerate(zip(P.tile_valid[p], shape)):
        pre = (slice(None),) * d
        if sl.start > 0:
            out.append(pre + (slice(0, sl.start),))
        if sl.stop < n:
            out.append(pre + (slice(sl.stop, n),))
    return out


@dataclass
class SimulationResult:
    """Outputs of a functional run, the timed model's report, and how long the simulation took."""

    outputs: dict[str, np.ndarray]
    timing: TimingReport | None
    functional_seconds: float = 0.0
    timing_seconds: float = 0.0
    instructions: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cycles(self) -> float:
        return self.timing.cycles if self.timing else float("nan")


def simulate(schedule: Any, inputs: Mapping[str, np.ndarray] | None = None, *, timing: bool = True,
             functional: bool = True) -> SimulationResult:
    """Run a :class:`~tvm_ext.accel.scheduler.Schedule`: outputs from the functional run, cycles from the timed one."""
    outs: dict[str, np.ndarray] = {}
    fs = ts = 0.0
    if functional:
        if inputs is None:
            raise InputError("simulate: functional simulation needs the inputs")
        t0 = time.perf_counter()
        sim = FunctionalSimulator(schedule)
        sim.load(inputs)
        sim.run(schedule.stream)
        outs = sim.outputs()
        fs = time.perf_counter() - t0
    rep = None
    if timing:
        t0 = time.perf_counter()
        tl = Timeline(schedule.system)
        tl.run(schedule.stream)
        rep = tl.report()
        ts = time.perf_counter() - t0
    return SimulationResult(outs, rep, fs, ts, len(schedule.stream))


register_sim_implementations("accel")
