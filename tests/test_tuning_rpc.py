"""Measuring through a TVM RPC tracker: a tracker and a server on 127.0.0.1 started inside the test."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tvm_ext.errors import TuningError
from tvm_ext.tuning.rpc import LocalCluster, RPCSettings, check_tracker, free_port, rpc_runner


def test_unreachable_tracker_is_a_clear_error_within_the_timeout():
    port = free_port()
    t0 = time.perf_counter()
    with pytest.raises(TuningError, match=rf"127.0.0.1:{port} is unreachable"):
        check_tracker(RPCSettings("127.0.0.1", port, "cpu", timeout=2.0))
    assert time.perf_counter() - t0 < 5.0


def test_tracker_settings_are_validated():
    for bad in ("localhost", "host:port", ":9190", "h:70000"):
        with pytest.raises(TuningError, match="HOST:PORT"):
            RPCSettings.parse(bad, "cpu")
    with pytest.raises(TuningError, match="--rpc-key"):
        RPCSettings.parse("127.0.0.1:9190", None)


def test_cli_with_an_unreachable_tracker_fails_fast(tmp_path):
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tvm_ext.cli.main", "tune", "gemm", "--shape", "16", "16", "16",
                        "--trials", "2", "--db", str(tmp_path / "db"), "--rpc-tracker", f"127.0.0.1:{port}",
                        "--rpc-key", "cpu"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 2 and "unreachable" in p.stderr and "Traceback" not in p.stderr
    assert time.perf_counter() - t0 < 120


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(1, key="tvmext-test") as c:
        yield c


def test_tracker_knows_the_server_and_rejects_an_unknown_key(cluster):
    assert check_tracker(cluster.settings) == 1
    with pytest.raises(TuningError, match="no free server under key 'nope'"):
        check_tracker(RPCSettings(cluster.host, cluster.port, "nope"))


def test_rpc_runner_measures_a_sparse_kernel_with_its_stored_arguments(cluster, tmp_path):
    """Build one executor candidate here, measure it on the RPC server with the real CSR arrays."""
    from tvm_ext.target import resolve_target
    from tvm_ext.tuning.measure import ArgStore, InProcessBuilder, args_info_of, measure_mods
    from tvm_ext.tuning.spaces import spmm_default
    from tvm_ext.workloads import lap2d

    task = spmm_default(lap2d(16), 8)
    ArgStore(tmp_path / "args").put(args_info_of(task.mod["main"]), task.args)
    target = resolve_target(None)
    runner = rpc_runner(cluster.settings, tmp_path / "args", workers=1)
    secs = measure_mods([task.mod], target, InProcessBuilder(), runner)
    assert isinstance(secs[0], float) and 0 < secs[0] < 1.0, secs
    for _ in range(50):  # the server re-registers with the tracker after the session closes
        try:
            assert check_tracker(cluster.settings) == 1
            break
        except TuningError:
            time.sleep(0.3)
    else:
        pytest.fail("the RPC server did not return to the tracker's pool")


@pytest.mark.slow
def test_session_over_rpc_measures_on_the_server(cluster, tmp_path):
    from tvm_ext.tuning.session import run_session
    from tvm_ext.tuning.tasks import make_task

    r = run_session(make_task("gemm", shape=(16, 16, 16)), tmp_path / "db", 3, rpc=cluster.settings,
                    progress=False)
    assert r.rpc == f"127.0.0.1:{cluster.port}/tvmext-test"
    assert r.records == 3 and r.verified is True and r.best > 0
