"""Demo: the bundled matrices, measured and set against the papers' tables."""
from __future__ import annotations

from tvm_ext.markdown import table
from tvm_ext.workloads import GOGETA_TABLE2, lap2d, lap3d, list_matrices, load_matrix, matrix_stats

TITLE = "Workloads: bundled SuiteSparse matrices and generators"


def run():
    rows, data = [], {}
    for name in sorted(list_matrices()):
        st = matrix_stats(load_matrix(name), max_block=4)
        paper = GOGETA_TABLE2.get(name)
        best = max(st["block_fill"].items(), key=lambda kv: kv[1] if kv[0] != "1x1" else 0)
        rows.append([name, f"{st['rows']}x{st['cols']}", st["nnz"], paper.nnz if paper else None,
                     st["row_length"]["max"], st["diagonals"], f"{best[0]} ({best[1]:.2f})"])
        data[name] = {"rows": st["rows"], "nnz": st["nnz"], "paper_nnz": paper.nnz if paper else None}
    for label, A in (("lap2d(64) 5pt", lap2d(64)), ("lap3d(16) 27pt", lap3d(16, 27))):
        st = matrix_stats(A, max_block=4)
        rows.append([label, f"{st['rows']}x{st['cols']}", st["nnz"], None, st["row_length"]["max"],
                     st["diagonals"], "-"])
        data[label] = {"rows": st["rows"], "nnz": st["nnz"]}
    lines = [table(["matrix", "shape", "nnz", "GOGETA Table 2 nnz", "max row", "diagonals",
                    "best block fill (>1x1)"], rows)]
    cora = load_matrix("cora")
    loops = int((cora.diagonal() != 0).sum())
    lines.append(f"note: the bundled cora has {loops:,} self-loops and {cora.nnz - loops:,} off-diagonal "
                 f"non-zeros; GOGETA's Table 2 lists nnz={GOGETA_TABLE2['cora'].nnz:,} for its copy.")
    return data, lines
