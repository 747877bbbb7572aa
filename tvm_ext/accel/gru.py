"""The GRU cell of ISA Mapper §6.2.2 (DeepBench shapes) as an accelerator workload, and its numpy reference.

One step, with the three gates fused into ``3H``-wide matrices (PyTorch's
layout, weights stored ``(in, 3H)``)::

    gi = x @ W_ih + b_ih ;  gh = h @ W_hh + b_hh
    r  = sigmoid(gi_r + gh_r) ;  z = sigmoid(gi_z + gh_z)
    n  = tanh(gi_n + r * gh_n)
    h' = n + z * (h - n)            # = (1 - z) * n + z * h

Two matmuls, two bias adds and ten element-wise ops; the gate blocks are
views (column offsets) of ``gi``/``gh``.  With ``inplace`` the cell writes
``h'`` over the state ``h`` (the form the recurrent scheduler replays);
otherwise ``h'`` is a new output ``h_next``.

>>> wl = gru_cell(batch=2, hidden=32)
>>> len(wl.ops), wl.outputs
(14, ['h'])
>>> import numpy as np
>>> ins = wl.random_inputs(seed=0)
>>> ref = gru_reference(ins["x"][None], ins["h"], ins["w_ih"], ins["w_hh"], ins["b_ih"], ins["b_hh"])
>>> bool(np.allclose(wl.reference(ins)["h"], ref))
True
"""
from __future__ import annotations

import numpy as np

from tvm_ext.errors import ShapeError

from .workload import Workload

__all__ = ["gru_cell", "gru_reference", "gru_sequence_inputs", "unrolled_gru"]


def _cell(wl: Workload, x: str, h: str, H: int, B: int, out: str) -> str:
    gi = wl.bias_add(wl.matmul(x, "w_ih"), "b_ih")
    gh = wl.bias_add(wl.matmul(h, "w_hh"), "b_hh")

    def gate(t: str, k: int):
        return wl.block(t, (0, k * H), (B, H))

    r = wl.sigmoid(wl.add(gate(gi, 0), gate(gh, 0)))
    z = wl.sigmoid(wl.add(gate(gi, 1), gate(gh, 1)))
    n = wl.tanh(wl.add(gate(gi, 2), wl.mul(r, gate(gh, 2))))
    return wl.add(n, wl.mul(z, wl.sub(h, n)), out=out)


def _weights(wl: Workload, I: int, H: int) -> None:
    wl.weight("w_ih", (I, 3 * H))
    wl.weight("w_hh", (H, 3 * H))
    wl.weight("b_ih", (3 * H,))
    wl.weight("b_hh", (3 * H,))


def gru_cell(batch: int, hidden: int, inputs: int | None = None, *, inplace: bool = True,
             name: str = "gru_cell") -> Workload:
    """One GRU step (see the module docstring); ``inputs`` defaults to ``hidden``."""
    B, H, I = int(batch), int(hidden), int(inputs or hidden)
    if min(B, H, I) < 1:
        raise ShapeError(f"gru_cell: batch, hidden and inputs must be >= 1, got {B}, {H}, {I}")
    wl = Workload(name)
    x = wl.input("x", (B, I))
    h = wl.state("h", (B, H)) if inplace else wl.input("h", (B, H))
    _weights(wl, I, H)
    _cell(wl, x, h, H, B, "h" if inplace else "h_next")
    return wl


def unrolled_gru(steps: int, batch: int, hidden: int, inputs: int | None = None) -> Workload:
    """``steps`` cells chained in one workload (inputs ``x0..x{T-1}``, initial ``h``, output ``h_out``)."""
    B, H, I = int(batch), int(hidden), int(inputs or hidden)
    wl = Workload(f"gru_unrolled_{steps}")
    xs = [wl.input(f"x{t}", (B, I)) for t in range(steps)]
    h = wl.input("h", (B, H))
    _weights(wl, I, H)
    for t in range(steps):
        h = _cell(wl, xs[t], h, H, B, "h_out" if t == steps - 1 else None)
    return wl


def gru_reference(xs: np.ndarray, h0: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray,
                  b_hh: np.ndarray) -> np.ndarray:
    """Final state after running ``xs`` (T, B, I) through the cell, in float64."""
    xs = np.asarray(xs, dtype=np.float64)
    h = np.asarray(h0, dtype=np.float64)
    H = h.shape[1]
    for x in xs:
        gi = x @ w_ih + b_ih
        gh = h @ w_hh + b_hh
        r = 1 / (1 + np.exp(-(gi[:, :H] + gh[:, :H])))
        z = 1 / (1 + np.exp(-(gi[:, H:2 * H] + gh[:, H:2 * H])))
        n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        h = n + z * (h - n)
    return h


def gru_sequence_inputs(steps: int, batch: int, hidden: int, inputs: int | None = None,
                        seed: int = 0) -> dict[str, np.ndarray]:
    """Random ``xs`` (T, B, I), ``h``, weights scaled by 1/sqrt(H), biases."""
    B, H, I = int(batch), int(hidden), int(inputs or hidden)
    rng = np.random.default_rng(seed)
    s = 1.0 / np.sqrt(H)
    f32 = np.float32
    return {"xs": rng.uniform(-1, 1, (steps, B, I)).astype(f32), "h": rng.uniform(-1, 1, (B, H)).astype(f32),
            "w_ih": rng.uniform(-s, s, (I, 3 * H)).astype(f32), "w_hh": rng.uniform(-s, s, (H, 3 * H)).astype(f32),
            "b_ih": rng.uniform(-s, s, 3 * H).astype(f32), "b_hh": rng.uniform(-s, s, 3 * H).astype(f32)}
