"""Helpers shared by the accelerator system-graph and config-file tests."""
from __future__ import annotations


def tiny(**over) -> dict:
    """A minimal valid graph: one HBM, one register file, one unit, a DMA."""
    cfg = {
        "name": "tiny",
        "memories": [{"name": "hbm", "kind": "hbm", "capacity": 1 << 20},
                     {"name": "rf", "kind": "regfile", "capacity": 1 << 16}],
        "copy_engines": [{"name": "dma"}],
        "computes": [{"name": "u", "kind": "matrix", "memories": ["rf"], "instructions": ["matmul_32x32x32"]}],
        "edges": [{"src": "hbm", "dst": "rf", "bandwidth": 32, "latency": 10, "issuer": "dma",
                   "bidirectional": True}],
    }
    cfg.update(over)
    return cfg
