"""System description graph (ISA Mapper §3.2): loading, round trip, derived tables, bad configs."""
from __future__ import annotations

import copy
import json

import pytest

from tvm_ext.accel import SystemGraph, available_systems, load_system
from tvm_ext.errors import ConfigError

from accel_helpers import tiny


def test_bundled_configs_load_and_differ():
    assert {"default", "mini"} <= set(available_systems())
    d, m = load_system("default"), load_system("mini")
    assert len(d.computes) == 32 and len(m.computes) == 4
    assert d.memory("c0.rf0").max_operands == 1 and m.memory("c0.rf0").max_operands == 2
    assert d.transposing_copies and not m.transposing_copies
    assert "matmul_32x32x32" in d.supported_instructions()
    assert "matmul_32x32x32" not in m.supported_instructions()  # the mini machine only has 16x16x16
    assert m.cycles(0, "matmul_16x16x16") == 40.0  # a cost given in the config
    assert d.cycles(0, "matmul_32x32x32") == 48.0  # the library's nominal cost (null in the config)


def test_round_trip_through_json(tmp_path):
    g = load_system("default")
    path = tmp_path / "g.json"
    path.write_text(g.to_json(indent=1))
    g2 = load_system(str(path))
    assert g2 == g and g2.to_dict() == g.to_dict()
    assert SystemGraph.from_dict(json.loads(g.to_json())) == g


def test_foreach_and_globs_expand():
    g = load_system("default")
    # hbm* -> c{c}.rf* bidirectional for 8 clusters: 4 x 4 x 8 x 2 edges, each issued by its cluster's DMA
    hbm_rf = [e for e in g.edges if e.src.startswith("hbm") and ".rf" in e.dst]
    assert len(hbm_rf) == 4 * 4 * 8
    assert all(e.issuer == e.dst.split(".")[0] + ".dma" for e in hbm_rf)


def test_shortest_path_and_domains():
    g = load_system("default")
    path = g.path("host", "c2.rf3")
    assert [(e.src, e.dst) for e in path] == [("host", path[0].dst), (path[0].dst, "c2.rf3")]
    assert path[0].dst.startswith("hbm")
    assert g.path_cost("hbm0", "c0.rf0", 4096) == pytest.approx(200 + 4096 / 64)
    assert g.domain(0) == g.domain(1) != g.domain(2)  # c0.mx0 and c0.mx1 share a cluster
    assert g.channels(g.device_index["c0.dma"]) == 4 and g.channels(0) == 1


def test_unreachable_memory_is_a_config_error():
    cfg = tiny()
    cfg["memories"].append({"name": "rf2", "kind": "regfile", "capacity": 4096})
    cfg["computes"][0]["memories"] = ["rf", "rf2"]
    with pytest.raises(ConfigError, match="rf2.*unreachable"):
        SystemGraph.from_dict(cfg)


def test_one_way_memory_is_a_config_error():
    cfg = tiny()
    cfg["edges"][0]["bidirectional"] = False
    with pytest.raises(ConfigError, match="written back"):
        SystemGraph.from_dict(cfg)


def test_instruction_no_library_has_is_a_config_error():
    cfg = tiny()
    cfg["computes"][0]["instructions"] = ["matmul_64x64x64"]
    with pytest.raises(ConfigError, match="matmul_64x64x64.*not in the 'accel'"):
        SystemGraph.from_dict(cfg)


@pytest.mark.parametrize("bw", [0, -1, "fast"])
def test_bad_bandwidth_is_a_config_error(bw):
    cfg = tiny()
    cfg["edges"][0]["bandwidth"] = bw
    with pytest.raises(ConfigError, match="bandwidth"):
        SystemGraph.from_dict(cfg)


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c["edges"][0].update(issuer="nobody"), "issuer 'nobody'"),
    (lambda c: c["memories"][1].update(capacity=0), "capacity"),
    (lambda c: c["computes"][0].update(memories=["nowhere"]), "unknown memory"),
    (lambda c: c["edges"][0].update(latency=-5), "latency"),
    (lambda c: c.update(memories=c["memories"] + [c["memories"][0]]), "duplicate"),
    (lambda c: c.update(colour="blue"), "unknown field"),
    (lambda c: c["edges"][0].update(src="nothing*"), "names no memory"),
    (lambda c: c["computes"][0]["instructions"].__setitem__(0, "fill_32x32") or c["computes"][0].update(
        instructions={"fill_32x32": 0}), "must be > 0"),
    (lambda c: c["copy_engines"][0].update(channels=0), "channels"),
    (lambda c: c["memories"].__setitem__(0, {"name": "hbm", "kind": "sram", "capacity": 1 << 20}), "no memory of kind"),
])
def test_other_bad_configs(mutate, match):
    cfg = copy.deepcopy(tiny())
    mutate(cfg)
    with pytest.raises(ConfigError, match=match):
        SystemGraph.from_dict(cfg)


def test_bad_json_and_unknown_name(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_system(str(bad))
    with pytest.raises(ConfigError, match="bundled"):
        load_system("no-such-machine")
