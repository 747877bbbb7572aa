"""Helpers shared by the tensorize mapper and search tests."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te
from tvm.s_tir.schedule.analysis import get_auto_tensorize_mapping_info

from tensorize import Program, evaluate


def ph(shape, name):
    return te.placeholder(shape, "float32", name=name)


def matmul_args(M=64, N=64, K=64):
    A, B = ph((M, K), "A"), ph((K, N), "B")
    k = te.reduce_axis((0, K), "k")
    return [A, B, te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


def random_inputs(p: Program, rng: np.random.Generator) -> dict:
    return {b.name: rng.standard_normal(b.interface_shape).astype("float32") for b in p.buffers if b.role == "input"}


def check_mappings(mappings, program: Program, rng: np.random.Generator, *, transformed: bool = False) -> None:
    """Each mapping, run as instruction calls (and, with ``transformed``, its transformed program
    through the interpreter), equals the reference interpreter on the original program."""
    ins = random_inputs(program, rng)
    ref = evaluate(program, ins)
    for m in mappings:
        runs = (evaluate(m.program, ins), m.simulate(ins)) if transformed else (m.simulate(ins),)
        for got in runs:
            for name, want in ref.items():
                np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4, err_msg=m.summary())


def tvm_auto_mappings(args, block: str, instruction, tile=None):
    """TVM's own matcher (get_auto_tensorize_mapping_info) on the same kernel and instruction."""
    sch = s_tir.Schedule(te.create_prim_func(args))
    info = get_auto_tensorize_mapping_info(sch, sch.get_sblock(block), instruction.to_prim_func(tile))
    return None if info is None else list(info.mappings)
