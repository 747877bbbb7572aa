"""Measuring on machines registered with a TVM RPC tracker.

``tvm-ext tune ... --rpc-tracker HOST:PORT --rpc-key KEY`` hands MetaSchedule an
``RPCRunner``: candidates are built here and measured on whichever server
under ``KEY`` the tracker lends, ``max_workers`` at a time (one per free
server), so scaling out is only a matter of starting more servers::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
    python -m tvm.exec.rpc_server --tracker HOST:9190 --key KEY    # on each machine

:func:`check_tracker` fails fast and clearly (a socket probe with a timeout,
then the tracker's summary) instead of MetaSchedule's minute of retries.
:class:`LocalCluster` starts a tracker and N servers on 127.0.0.1 (tests and
``bench/tuning.py``) and stops them, popen workers included (each runs in its
own process group).

>>> RPCSettings.parse("127.0.0.1:9190", "cpu").port
9190
"""
from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from tvm_ext.errors import TuningError

__all__ = ["RPCSettings", "check_tracker", "rpc_runner", "LocalCluster", "free_port"]

#: Seconds one RPC measurement session may take before MetaSchedule gives up on it.
SESSION_TIMEOUT = 120


@dataclass(frozen=True)
class RPCSettings:
    """Where the tracker is and which server key to request."""

    host: str
    port: int
    key: str
    timeout: float = 5.0

    @classmethod
    def parse(cls, tracker: str, key: str | None, timeout: float = 5.0) -> "RPCSettings":
        """``HOST:PORT`` plus a key; :class:`TuningError` when malformed."""
        if not key:
            raise TuningError("--rpc-tracker needs --rpc-key KEY (the key the servers registered with)")
        host, sep, port = str(tracker).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise TuningError(f"--rpc-tracker {tracker!r}: expected HOST:PORT, e.g. 127.0.0.1:9190")
        return cls(host, int(port), str(key), float(timeout))


def _summary(settings: RPCSettings) -> dict:
    """The tracker's summary, or :class:`TuningError` within ``settings.timeout`` seconds."""
    try:
        with socket.create_connection((settings.host, settings.port), timeout=settings.timeout):
            pass
    except OSError as err:
        raise TuningError(
            f"RPC tracker {settings.host}:{settings.port} is unreachable ({err.strerror or err}); start one with "
            f"`python -m tvm.exec.rpc_tracker --host {settings.host} --port {settings.port}`") from None
    from tvm import rpc

    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(settings.timeout)
    try:
        tracker = rpc.connect_tracker(settings.host, settings.port)
        return tracker.summary()
    except Exception as err:  # noqa: BLE001 - any failure here means no usable tracker
        raise TuningError(f"RPC tracker {settings.host}:{settings.port} did not answer as a TVM tracker: "
                          f"{type(err).__name__}: {err}") from None
    finally:
        socket.setdefaulttimeout(old)


def check_tracker(settings: RPCSettings) -> int:
    """Number of servers registered under the key; :class:`TuningError` if none or no tracker."""
    summary = _summary(settings)
    n = int(summary.get("queue_info", {}).get(settings.key, {}).get("free", 0))
    if n == 0:
        keys = sorted(summary.get("queue_info", {}))
        raise TuningError(f"RPC tracker {settings.host}:{settings.port} has no free server under key "
                          f"{settings.key!r} (keys: {', '.join(keys) or 'none'}); start one with "
                          f"`python -m tvm.exec.rpc_server --tracker {settings.host}:{settings.port} "
                          f"--key {settings.key}`")
    return n


def rpc_runner(settings: RPCSettings, store_dir: str | os.PathLike, workers: int = 1):
    """A MetaSchedule ``RPCRunner`` measuring with the session's stored arguments."""
    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.tuning.measure import alloc_rpc, evaluator_config

    config = ms.runner.RPCConfig(tracker_host=settings.host, tracker_port=settings.port,
                                 tracker_key=settings.key, session_priority=1,
                                 session_timeout_sec=SESSION_TIMEOUT)
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator_config(),
                               max_workers=max(1, int(workers)),
                               f_alloc_argument=functools.partial(alloc_rpc, str(store_dir)))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """A tracker and ``servers`` RPC servers on 127.0.0.1, as a context manager.

    >>> with LocalCluster(1) as c:          # doctest: +SKIP
    ...     c.settings.key
    'tvmext-local'
    """

    def __init__(self, servers: int = 1, key: str = "tvmext-local", host: str = "127.0.0.1",
                 start_timeout: float = 60.0):
        self.n, self.key, self.host, self.start_timeout = int(servers), key, host, start_timeout
        self.procs: list[subprocess.Popen] = []
        self.port = 0

    @property
    def settings(self) -> RPCSettings:
        return RPCSettings(self.host, self.port, self.key)

    def _spawn(self, args: list[str]) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, env=dict(os.environ))
        self.procs.append(p)
        return p

    def __enter__(self) -> "LocalCluster":
        self.port = free_port(self.host)
        try:
            self._spawn(["tvm.exec.rpc_tracker", "--host", self.host, "--port", str(self.port),
                         "--port-end", str(self.port + 1)])
            self._wait(lambda: self._reachable(), "tracker")
            for _ in range(self.n):
                sp = free_port(self.host)
                self._spawn(["tvm.exec.rpc_server", "--tracker", f"{self.host}:{self.port}", "--key", self.key,
                             "--host", self.host, "--port", str(sp), "--port-end", str(sp + 1)])
            self._wait(lambda: self._free() >= self.n, f"{self.n} server(s)")
        except BaseException:
            self.stop()
            raise
        return self

    def _reachable(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def _free(self) -> int:
        try:
            return int(_summary(self.settings).get("queue_info", {}).get(self.key, {}).get("free", 0))
        except TuningError:
            return 0

    def _wait(self, ok, what: str) -> None:
        t0 = time.time()
        while not ok():
            if any(p.poll() is not None for p in self.procs):
                raise TuningError(f"local RPC cluster: a process exited while waiting for the {what}")
            if time.time() - t0 > self.start_timeout:
                raise TuningError(f"local RPC cluster: the {what} did not come up in {self.start_timeout:.0f} s")
            time.sleep(0.3)

    def stop(self) -> None:
        """Terminate every process group this cluster started (popen workers included)."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
        self.procs = []

    def __exit__(self, *exc: Any) -> None:
        self.stop()
