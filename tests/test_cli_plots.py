"""``--plot`` of ``tvm-ext sextans`` and ``tvm-ext accel``: a PNG beside the JSON, drawn from the simulators' data."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tvm_ext.cli.main import main

pytest.importorskip("matplotlib")


def _png_pixels(path) -> np.ndarray:
    from matplotlib.image import imread

    assert path.stat().st_size > 0
    return imread(str(path))


def test_sextans_plot_draws_the_per_pe_stream(capsys, tmp_path):
    png = tmp_path / "pes.png"
    code = main(["sextans", "LFAT5", "--n", "8", "--pes", "8", "--json", "--plot", str(png)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["plot"] == str(png)
    # the numbers the bars show: per PE, non-zeros <= own length <= stream length, non-zeros sum to nnz
    nnz, own = np.array(data["pe_nnz"]), np.array(data["pe_lengths"])
    assert nnz.size == 8 and nnz.sum() == data["nnz"]
    assert np.all(nnz <= own) and own.max() <= data["stream_length"]
    assert (own - nnz).sum() == data["raw_bubbles"]
    assert np.ptp(_png_pixels(png)) > 0


def test_sextans_plot_with_breakdown_is_refused(capsys, tmp_path):
    code = main(["sextans", "LFAT5", "--breakdown", "--plot", str(tmp_path / "x.png")])
    assert code == 2 and "--plot" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("argv", [["gemm", "40", "24", "70"], ["gru", "--steps", "5", "--hidden", "16",
                                                                 "--batch", "2"]])
def test_accel_plot_writes_a_gantt_chart(capsys, tmp_path, argv):
    png = tmp_path / "gantt.png"
    code = main(["accel", *argv, "--config", "mini", "--no-check", "--json", "--plot", str(png)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["plot"] == str(png)
    assert np.ptp(_png_pixels(png)) > 0


def test_device_intervals_account_for_every_busy_cycle():
    """The Gantt bars are the simulator's own timeline: their busy time matches its utilisation."""
    from tvm_ext.accel.cases import gemm_workload
    from tvm_ext.accel.plot import device_intervals
    from tvm_ext.accel.scheduler import schedule
    from tvm_ext.accel.timing import time_stream

    stream = schedule(gemm_workload(32, 24, 40), "mini").stream
    iv, cycles = device_intervals([stream], "mini")
    rep = time_stream(stream, "mini")
    assert cycles == pytest.approx(rep.cycles)
    for dev, kind in rep.device_kind.items():
        if kind != "dma":   # one queue per compute node: its bars add up to its busy cycles, copies it issues included
            assert sum(e - s for s, e in iv[dev]) == pytest.approx(rep.device_busy[dev])
