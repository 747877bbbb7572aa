"""A SIGINT handler installed for the length of a ``with`` block, main thread only.

Python lets only the main thread set signal handlers; elsewhere the block runs
with whatever handler is in place.  On leaving the block the previous handler
comes back, also when the block raises.

>>> import signal
>>> before = signal.getsignal(signal.SIGINT)
>>> with sigint_handler(lambda signum, frame: None) as installed:
...     installed
True
>>> signal.getsignal(signal.SIGINT) is before
True
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator

__all__ = ["sigint_handler"]


@contextlib.contextmanager
def sigint_handler(handler: Callable[[int, Any], None]) -> Iterator[bool]:
    """Install ``handler`` for SIGINT inside the block; yields whether it was installed.

    Off the main thread nothing is installed (``False``).

    >>> with sigint_handler(signal.default_int_handler) as installed:
    ...     installed
    True
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, previous)
