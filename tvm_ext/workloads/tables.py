"""The seeds' workload tables as data (shared by tests, benchmarks, demo, report).

Sources are cited per table.  Shapes use the seeds' own letters.

>>> GOGETA_TABLE2["nasa4704"].nnz
104756
>>> SEXTANS_N_SWEEP
(8, 16, 32, 64, 128, 256, 512)
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GogetaWorkload",
    "GOGETA_TABLE2",
    "GogetaArch",
    "GOGETA_TABLE4",
    "SEXTANS_N_SWEEP",
    "GemmShape",
    "DEEPBENCH_GEMM",
    "GruShape",
    "DEEPBENCH_GRU",
    "ConvLayer",
    "RESNET50_CONV",
    "MOBILENET_V1_SEPARABLE",
]


@dataclass(frozen=True)
class GogetaWorkload:
    """A row of GOGETA Table 2.  CG rows have ``N``/``O`` = None (N is swept)."""

    name: str
    kind: str  # "cg" or "gcn"
    M: int
    nnz: int
    N: int | None = None
    O: int | None = None
    bundled: bool = False  # shipped in tvm_ext/workloads/data


# GOGETA Table 2 ("Workloads and Datasets evaluated").
GOGETA_TABLE2: dict[str, GogetaWorkload] = {
    w.name: w
    for w in (
        GogetaWorkload("aft02", "cg", 8184, 127762),
        GogetaWorkload("ecology1", "cg", 1_000_000, 4_996_000),
        GogetaWorkload("Barth5", "cg", 15606, 61484),
        GogetaWorkload("nasa4704", "cg", 4704, 104756, bundled=True),
        GogetaWorkload("cora", "gcn", 2708, 9464, N=1433, O=7, bundled=True),
        GogetaWorkload("protein", "gcn", 3786, 14456, N=29, O=2),
    )
}


@dataclass(frozen=True)
class GogetaArch:
    """GOGETA Table 4 ("Configurations for workloads and architecture")."""

    bytes_per_word: int = 4
    cg_iterations: int = 10
    n_sweep: tuple[int, ...] = (1, 8, 16)
    pes_per_cluster: int = 1024
    clusters: int = 16
    sram_sweep_mb: tuple[int, ...] = (1, 4, 16)
    rf_bytes_per_pe: int = 512  # 0.5 KB


GOGETA_TABLE4 = GogetaArch()

# Sextans §5 evaluation: N = 8, 16, ..., 512 (7 values).
SEXTANS_N_SWEEP: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class GemmShape:
    """C[M, N] = A[M, K] @ B[K, N]."""

    M: int
    N: int
    K: int

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K


# DeepBench (Baidu, 2017) gemm_bench training shapes, the set ISA Mapper §6.2.1 uses:
# the skinny recurrent-layer GEMMs (N = 16..128), the speech front-end (35 x 8457),
# and the large output layers.
DEEPBENCH_GEMM: tuple[GemmShape, ...] = (
    GemmShape(1760, 16, 1760),
    GemmShape(1760, 32, 1760),
    GemmShape(1760, 64, 1760),
    GemmShape(1760, 128, 1760),
    GemmShape(1760, 7000, 1760),
    GemmShape(2048, 16, 2048),
    GemmShape(2048, 32, 2048),
    GemmShape(2048, 64, 2048),
    GemmShape(2048, 128, 2048),
    GemmShape(2560, 16, 2560),
    GemmShape(2560, 32, 2560),
    GemmShape(2560, 64, 2560),
    GemmShape(2560, 128, 2560),
    GemmShape(4096, 16, 4096),
    GemmShape(4096, 32, 4096),
    GemmShape(4096, 128, 4096),
    GemmShape(35, 8457, 1760),
    GemmShape(35, 8457, 2048),
    GemmShape(35, 8457, 2560),
    GemmShape(3072, 16, 1024),
    GemmShape(3072, 128, 1024),
    GemmShape(7680, 16, 2560),
    GemmShape(7680, 128, 2560),
    GemmShape(5124, 9124, 1760),
)


@dataclass(frozen=True)
class GruShape:
    """A GRU layer: hidden size H, batch B, input size I (= H), T time steps."""

    hidden: int
    batch: int
    steps: int = 128
    input_size: int | None = None

    @property
    def inputs(self) -> int:
        return self.input_size or self.hidden


# DeepBench rnn_bench GRU hidden sizes and batches; steps fixed at 128 as in
# ISA Mapper §6.2.2 ("a GRU ... over 128 steps, using matrix shapes adapted from DeepBench").
DEEPBENCH_GRU: tuple[GruShape, ...] = (
    GruShape(512, 1),
    GruShape(512, 16),
    GruShape(512, 32),
    GruShape(1024, 1),
    GruShape(1024, 32),
    GruShape(1536, 16),
    GruShape(2048, 32),
    GruShape(2560, 32),
    GruShape(2816, 32),
)


@dataclass(frozen=True)
class ConvLayer:
    """A 2-D convolution layer at batch ``n`` (NCHW naming).

    ``groups == c_in == c_out`` marks a depthwise layer.
    """

    name: str
    c_in: int
    c_out: int
    hw: int  # input height == width
    kernel: int
    stride: int = 1
    pad: int = 0
    groups: int = 1
    n: int = 1

    @property
    def out_hw(self) -> int:
        return (self.hw + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def flops(self) -> int:
        per_out = 2 * (self.c_in // self.groups) * self.kernel * self.kernel
        return self.n * self.c_out * self.out_hw ** 2 * per_out


# ResNet-50 v1.5 convolution layers (He et al. 2016; stride in the 3x3), one entry
# per distinct shape, the layer set ISA Mapper §7 runs with ISAM-TVM.
RESNET50_CONV: tuple[ConvLayer, ...] = (
    ConvLayer("conv1", 3, 64, 224, 7, 2, 3),
    ConvLayer("res2_1x1a", 64, 64, 56, 1),
    ConvLayer("res2_3x3", 64, 64, 56, 3, 1, 1),
    ConvLayer("res2_1x1b", 64, 256, 56, 1),
    ConvLayer("res2_1x1c", 256, 64, 56, 1),
    ConvLayer("res3_1x1a", 256, 128, 56, 1),
    ConvLayer("res3_3x3s2", 128, 128, 56, 3, 2, 1),
    ConvLayer("res3_1x1b", 128, 512, 28, 1),
    ConvLayer("res3_proj", 256, 512, 56, 1, 2),
    ConvLayer("res3_1x1c", 512, 128, 28, 1),
    ConvLayer("res3_3x3", 128, 128, 28, 3, 1, 1),
    ConvLayer("res4_1x1a", 512, 256, 28, 1),
    ConvLayer("res4_3x3s2", 256, 256, 28, 3, 2, 1),
    ConvLayer("res4_1x1b", 256, 1024, 14, 1),
    ConvLayer("res4_proj", 512, 1024, 28, 1, 2),
    ConvLayer("res4_1x1c", 1024, 256, 14, 1),
    ConvLayer("res4_3x3", 256, 256, 14, 3, 1, 1),
    ConvLayer("res5_1x1a", 1024, 512, 14, 1),
    ConvLayer("res5_3x3s2", 512, 512, 14, 3, 2, 1),
    ConvLayer("res5_1x1b", 512, 2048, 7, 1),
    ConvLayer("res5_proj", 1024, 2048, 14, 1, 2),
    ConvLayer("res5_1x1c", 2048, 512, 7, 1),
    ConvLayer("res5_3x3", 512, 512, 7, 3, 1, 1),
)


def _mobilenet_v1() -> tuple[tuple[ConvLayer, ConvLayer], ...]:
    # (channels in, channels out, input size, depthwise stride) for the 13 blocks
    # of MobileNet-v1 at 224x224 (Howard et al. 2017, Table 1).
    spec = [(32, 64, 112, 1), (64, 128, 112, 2), (128, 128, 56, 1), (128, 256, 56, 2),
            (256, 256, 28, 1), (256, 512, 28, 2)] + [(512, 512, 14, 1)] * 5 + [
            (512, 1024, 14, 2), (1024, 1024, 7, 1)]
    blocks = []
    for idx, (cin, cout, hw, s) in enumerate(spec, start=1):
        dw = ConvLayer(f"dw{idx}", cin, cin, hw, 3, s, 1, groups=cin)
        pw = ConvLayer(f"pw{idx}", cin, cout, dw.out_hw, 1)
        blocks.append((dw, pw))
    return tuple(blocks)


#: MobileNet-v1's 13 depthwise-separable blocks as (depthwise 3x3, pointwise 1x1) pairs.
MOBILENET_V1_SEPARABLE: tuple[tuple[ConvLayer, ConvLayer], ...] = _mobilenet_v1()
