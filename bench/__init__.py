"""Benchmarks: scripts that print markdown tables and write JSON lines.

Run one with ``python -m bench.<name>``; results go to ``bench/results/`` (or
``--out``).  Every script measures the peers named in its issue in the same run
and reports ratios.  :mod:`bench.harness` holds the shared timing code.
"""
