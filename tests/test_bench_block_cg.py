"""bench.block_cg's helpers: the per-iteration working set and the cache-limit probe."""
from __future__ import annotations

from bench.block_cg import QUICK, cache_limit, matrices, working_set_bytes
from tvm_ext.workloads import lap2d


def test_working_set_counts_csr_and_four_block_vectors():
    A = lap2d(10)
    ws = working_set_bytes(A, 8)
    assert ws == A.data.nbytes + A.indices.nbytes + A.indptr.nbytes + 4 * 100 * 8 * 8
    assert working_set_bytes(A, 16) - working_set_bytes(A, 8) == 4 * 100 * 8 * 8


def test_cache_limit_is_one_of_the_probed_sizes():
    limit, probe = cache_limit((1, 4), repeat=2)
    assert [mb for mb, _ in probe] == [1, 4] and all(bw > 0 for _, bw in probe)
    assert limit in (1 << 20, 4 << 20)


def test_quick_suite_has_a_cache_and_a_dram_resident_matrix():
    """nasa4704 fits the last-level cache; the FEM matrix (2 n^2 rows, >= 12 nnz a row) is several
    times any core group's L3 (4 x 32 MB) even at N = 1."""
    from schedules.fusion.fusion_choice import cache_bytes, working_set_bytes as per_iteration

    names = list(matrices(QUICK))
    assert names[0] == "nasa4704"
    assert working_set_bytes(matrices(QUICK)["nasa4704"](), 8) < cache_bytes()
    fem = [int(n[15:-1]) for n in names if n.startswith("fem_elasticity(")]
    assert fem and per_iteration(2 * fem[0] ** 2, 1, 12 * 2 * fem[0] ** 2) > 4 * (32 << 20)


def test_interleaved_rounds_drop_the_warm_up_and_alternate_the_order():
    from bench.block_cg import interleaved

    calls = []
    out = interleaved({"a": lambda: calls.append("a") or len(calls), "b": lambda: calls.append("b") or len(calls)}, 3)
    assert calls == ["b", "a", "a", "b", "b", "a", "a", "b"]
    assert out == {"a": [3, 6, 7], "b": [4, 5, 8]}
