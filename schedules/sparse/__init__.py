"""Sparse inspector/executor schedules (Venkat 2016 dissertation, carried into TVM)."""
from schedules.sparse.formats import BCSR, COO, CSB, CSR, DIA, ELL, FORMATS, HYB, SELL, SparseFormat

__all__ = ["BCSR", "COO", "CSB", "CSR", "DIA", "ELL", "FORMATS", "HYB", "SELL", "SparseFormat"]
