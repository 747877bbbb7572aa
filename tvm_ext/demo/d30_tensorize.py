"""Demo: ISA Mapper mappings emitted as TVM TensorIntrins (x86 micro-kernel), checked and timed."""
from __future__ import annotations

import time

import numpy as np

from tvm_ext.markdown import table

TITLE = "Tensorize: kernels mapped onto x86 instructions, emitted as TensorIntrins, checked vs numpy"


def run():
    import tvm

    from tvm_ext.timing import numpy_time, time_tvm
    from tensorize.kernels import conv2d_nhwc, matmul, separable_conv2d, tensorized

    rows, data = [], {}
    for label, kernel in (("conv2d NHWC 3x3", conv2d_nhwc(1, 32, 64, 28, 3, 1, 1)),
                          ("separable conv (Listing 3)", separable_conv2d(1, 32, 64, 28, 3, 1, 1))):
        t = tensorized(kernel)
        ins = kernel.random_inputs(seed=0)
        err = float(np.max(np.abs(t(*ins) - kernel.reference(*ins))))
        maps = "; ".join(f"{b}: {m.instruction.name} {dict(m.axis_map)}" for b, m in t.plan.blocks.items())
        transforms = ", ".join(t.plan.structural) or "-"
        rows.append([label, maps, transforms, f"{err:.1e}"])
        data[label] = {"mappings": maps, "structural_transforms": t.plan.structural, "max_abs_error": err}
    lines = [table(["kernel", "instruction per block (axis map)", "IR transforms", "max |err| vs numpy"], rows)]

    M = N = K = 512
    k = matmul(M, N, K)
    t = tensorized(k, tiles={"rows": 8, "vector": 32}, outer="panel")
    a, b = k.random_inputs(seed=1)
    dev = tvm.cpu(0)
    ta, tb, tc = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), tvm.runtime.empty((M, N), "float32", dev)
    c = np.empty((M, N), "float32")
    time.sleep(0.3)  # let worker threads of earlier kernels park
    ours = time_tvm(t.module, "main", ta, tb, tc, repeat=5, min_repeat_ms=50).min
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=2e-3, atol=2e-3)
    _, peer = numpy_time(lambda: np.matmul(a, b, out=c))
    flops = 2.0 * M * N * K
    lines.append(f"GEMM {M}x{N}x{K} with matmul_8x32xk micro-kernel: {flops / ours / 1e9:.1f} GFLOP/s "
                 f"(numpy/OpenBLAS {flops / peer / 1e9:.1f} GFLOP/s, same run, best of 2 and 1 threads)")
    data["gemm_512"] = {"ours_gflops": flops / ours / 1e9, "numpy_gflops": flops / peer / 1e9}
    return data, lines
