"""Format recipes (Venkat 2016 Table 9.1 / §5.3): each a few lines, inspector and executor both derived.

>>> [r.name for r in (csr_recipe(), coo_recipe(), ell_recipe(), dia_recipe())]
['csr', 'coo', 'ell', 'dia']
"""
from __future__ import annotations

import numpy as np

from schedules.sparse.recipes.recipe import Recipe
from schedules.sparse.recipes.schedule import Reorder, RowTile, Scatter
from schedules.sparse.recipes.split import SplitRecipe
from schedules.sparse.recipes.steps import (Compact, CompactAndPad, Known, MakeDense, Normalize, Permute,
                                            Shift, Skew, SortRows, SplitAt, Tile)
from tvm_ext.errors import ScheduleError

__all__ = ["csr_recipe", "coo_recipe", "ell_recipe", "ell_col_recipe", "dia_recipe", "csb_recipe",
           "bcsr_recipe", "sdia_recipe", "sell_recipe", "hyb_recipe", "RECIPES"]


def csr_recipe() -> Recipe:
    """CSR (Listing 5.3): make-dense, then compact-and-pad the dense column loop."""
    return Recipe("csr", (MakeDense(), CompactAndPad(("k",), identity=0)), (RowTile(),))


def coo_recipe() -> Recipe:
    """COO: make-dense, compact rows and columns jointly (one iteration per entry)."""
    return Recipe("coo", (MakeDense(), Compact(("i", "k"))), (Scatter(),))


def _longest_row(csr) -> int:
    return int(np.diff(csr.indptr).max()) if csr.shape[0] else 0


def ell_recipe() -> Recipe:
    """ELL (Listing 5.16): normalise ``j`` to the row position, bound it by the width ``W``
    (the longest row), compact-and-pad every row (padding: value 0, column 0)."""
    return Recipe("ell", (Normalize("j"), Known("j", "W", _longest_row),
                          CompactAndPad(("i",), identity={"data": 0, "col": 0}, arrays=("data", "col"),
                                        keep_empty=True)), (RowTile(),))


def ell_col_recipe() -> Recipe:
    """Column-major ELL (the GPU layout, §5.3): ELL's steps with the position loop ``j`` moved
    outside the rows before compact-and-pad, so ``a_data[j, i]`` has the rows innermost; the
    executor reorders the row outermost (SpMV then reads ``lanes`` rows as one vector)."""
    _ell_pad = {"data": 0, "col": 0}
    return Recipe("ell_col", (Normalize("j"), Known("j", "W", _longest_row), Permute(("j", "i")),
                              CompactAndPad(("j",), identity=_ell_pad, arrays=("data", "col"), keep_empty=True)),
                  (Reorder(("i", "j")), RowTile()))


def sell_recipe(C: int = 8, sigma: int | None = None) -> Recipe:
    """SELL-C-sigma (Kreutzer et al. 2014): ELL's normalise, rows sorted by length inside
    windows of ``sigma`` rows (default ``32 * C``), rows tiled into chunks of ``C``, the
    position loop moved between chunk and row, compact-and-pad the positions *per chunk*
    (each chunk padded to its own longest row, column-major inside the chunk).  SpMM keeps a
    chunk row's accumulators across its positions; SpMV runs the chunk's rows together."""
    sigma = 32 * C if sigma is None else sigma
    return Recipe(f"sell{C}x{sigma}", (Normalize("j"), SortRows(sigma), Known("j", "W", _longest_row),
                                       Tile("i", C), Permute(("ii", "j", "i")),
                                       CompactAndPad(("j",), identity={"data": 0, "col": 0}, arrays=("data", "col"))),
                  (Reorder(("ii", "i", "p"), kinds=("spmm",)), RowTile()))


def _hyb_width(csr) -> int:
    from schedules.sparse.inspectors import choose_hyb_width

    return int(choose_hyb_width(csr))


def hyb_recipe(width: int | None = None, layout: str = "col") -> SplitRecipe:
    """HYB (Bell & Garland; §9.6's split ``j < W``): each row's first ``W`` entries as
    column-major ELL (:func:`ell_col_recipe`'s steps), the rest as row-sorted COO; ``width=None`` picks ``W`` by the storage model of
    ``inspectors.choose_hyb_width``."""
    if layout not in ("row", "col"):
        raise ScheduleError(f"hyb_recipe: layout must be 'row' or 'col', got {layout!r}")
    w = _hyb_width if width is None else _FixedWidth(int(width))
    pad = {"data": 0, "col": 0}
    if layout == "col":
        ell = Recipe("hyb_ell", (Normalize("j"), Known("j", "W", w), Permute(("j", "i")),
                                 CompactAndPad(("j",), identity=pad, arrays=("data", "col"), keep_empty=True)),
                     (Reorder(("i", "j")), RowTile()))
    else:
        ell = Recipe("hyb_ell_row", (Normalize("j"), Known("j", "W", w),
                                     CompactAndPad(("i",), identity=pad, arrays=("data", "col"), keep_empty=True)),
                     (RowTile(),))
    coo = Recipe("hyb_coo", (MakeDense(), Compact(("i", "k"))), (Scatter(),))
    name = ("hyb" if width is None else f"hyb{width}") + ("" if layout == "col" else "_row")
    return SplitRecipe(name, SplitAt("j", "W", w), (ell, coo))


class _FixedWidth:
    """A fixed HYB width ``W`` (the same object bounds the split and the ELL part)."""

    def __init__(self, width: int):
        self.width = width

    def __call__(self, csr) -> int:
        return self.width


def dia_recipe() -> Recipe:
    """DIA (Listing 5.13): make-dense, skew ``k`` by ``-i`` into diagonals, shift by ``M - 1``,
    diagonal-major, compact-and-pad the diagonals; the executor reorders the row outermost."""
    return Recipe("dia", (MakeDense(), Skew("k", "i", -1, name="d"), Shift("d", lambda m, k: m - 1),
                          Permute(("d", "i")), CompactAndPad(("d",), identity=0)),
                  (Reorder(("i", "p")), RowTile()))


def csb_recipe(beta: int = 4096) -> Recipe:
    """CSB (§6.1): make-dense, tile rows and columns by ``beta``, block-major, compact the
    entries of each block jointly; the executor scatters, one block row per thread."""
    return Recipe("csb", (MakeDense(name="l"), Tile("i", beta), Tile("l", beta),
                          Permute(("ii", "ll", "i", "l")),
                          CompactAndPad(("i", "l"), identity=0, index_dtype="uint16")),
                  (Scatter(),))


def bcsr_recipe(R: int = 4, C: int = 4) -> Recipe:
    """BCSR (§5.3): make-dense, tile rows by R and columns by C, block-major, compact-and-pad
    the block columns; the executor keeps the R x C block's output rows in registers."""
    return Recipe(f"bcsr{R}x{C}", (MakeDense(), Tile("i", R), Tile("k", C), Permute(("ii", "kk", "i", "k")),
                                   CompactAndPad(("kk",), identity=0)), (RowTile(),))


def sdia_recipe(T: int = 8) -> Recipe:
    """S-DIA, blocked diagonals (named in §5.3 with no recipe): DIA's make-dense, skew and
    shift, then tile the rows by ``T`` and compact-and-pad the diagonals *per row tile*, so a
    diagonal costs storage only in the row tiles where it has entries (varying bandwidth)."""
    return Recipe(f"sdia{T}", (MakeDense(), Skew("k", "i", -1, name="d"), Shift("d", lambda m, k: m - 1),
                               Tile("i", T), Permute(("ii", "d", "i")), CompactAndPad(("d",), identity=0)),
                  (RowTile(),))


#: Recipe factories by format name.
RECIPES = {"csr": csr_recipe, "coo": coo_recipe, "ell": ell_recipe, "ell_col": ell_col_recipe,
           "dia": dia_recipe, "csb": csb_recipe, "bcsr": bcsr_recipe, "sdia": sdia_recipe,
           "sell": sell_recipe, "hyb": hyb_recipe}
