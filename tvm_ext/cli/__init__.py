"""The ``tvm-ext`` command line (thin: parse, call the public API, print)."""
from tvm_ext.cli.main import main

__all__ = ["main"]
