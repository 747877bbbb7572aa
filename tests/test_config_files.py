"""JSON config files: non-finite numbers, wrong types, directories, templates and foreach limits."""
from __future__ import annotations

import json

import pytest

from tvm_ext.accel import SystemGraph, load_system
from tvm_ext.errors import ConfigError
from tvm_ext.json_config import parse_json, read_json_file
from tvm_ext.spmm_engine.config import EngineConfig, Platform

from accel_helpers import tiny


def clusters(n: int, **edge_over) -> dict:
    """``n`` clusters of one register file and one unit, made with foreach."""
    edge = {"src": "hbm", "dst": "c{c}.rf", "bandwidth": 32, "latency": 10, "issuer": "dma",
            "bidirectional": True, "foreach": {"c": n}}
    edge.update(edge_over)
    return tiny(memories=[{"name": "hbm", "kind": "hbm", "capacity": 1 << 20},
                          {"name": "c{c}.rf", "kind": "regfile", "capacity": 4096, "foreach": {"c": n}}],
                computes=[{"name": "c{c}.u", "kind": "matrix", "memories": ["c{c}.rf"],
                           "instructions": ["matmul_32x32x32"], "foreach": {"c": n}}],
                edges=[edge])


def write(tmp_path, text: str, name: str = "sys.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_non_finite_numbers_name_file_and_key(tmp_path, literal):
    text = json.dumps(tiny()).replace('"bandwidth": 32', f'"bandwidth": {literal}')
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_system(str(path))
    msg = str(info.value)
    assert str(path) in msg and "edges[0].bandwidth" in msg and "non-finite" in msg


def test_non_finite_numbers_in_dataclass_configs():
    with pytest.raises(ConfigError, match="freq_mhz: non-finite number Infinity"):
        Platform.from_json('{"name": "p", "freq_mhz": Infinity}')
    with pytest.raises(ConfigError, match="finite"):
        Platform("p", freq_mhz=float("inf"))
    with pytest.raises(ConfigError, match="pes: non-finite number NaN"):
        EngineConfig.from_json('{"pes": NaN}')


def test_engine_config_from_file_names_file_and_key(tmp_path):
    path = write(tmp_path, '{"pes": "eight"}', "engine.json")
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_file(path)
    assert str(path) in str(info.value) and "pes" in str(info.value)
    assert EngineConfig.from_file(write(tmp_path, '{"pes": 16}', "ok.json")) == EngineConfig(pes=16)


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda c: c["memories"][0].update(capacity="big"), "capacity"),
        (lambda c: c["edges"][0].update(bandwidth="fast"), "bandwidth"),
        (lambda c: c["edges"][0].update(latency=[1]), "latency"),
        (lambda c: c.update(clock_ghz="1GHz"), "clock_ghz"),
        (lambda c: c.update(transposing_copies="false"), "transposing_copies"),
        (lambda c: c["memories"][0].update(name=7), "name"),
        (lambda c: c["computes"][0].update(memories=[1]), "memories"),
        (lambda c: c["computes"][0].update(instructions=[None]), "instruction"),
        (lambda c: c["edges"][0].update(src=["hbm"]), "src"),
        (lambda c: c["edges"][0].update(bidirectional="yes"), "bidirectional"),
        (lambda c: c["memories"][1].update(max_operands=True), "max_operands"),
    ],
    ids=["capacity", "bandwidth", "latency", "clock", "bool", "name", "compute-memories", "instructions",
         "edge-src", "bidirectional", "max-operands-bool"],
)
def test_wrong_types_name_file_and_key(tmp_path, change, needle):
    cfg = tiny()
    change(cfg)
    path = write(tmp_path, json.dumps(cfg))
    with pytest.raises(ConfigError) as info:
        load_system(str(path))
    assert str(path) in str(info.value) and needle in str(info.value)


def test_directory_and_non_regular_config_paths(tmp_path):
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load_system(str(tmp_path / "dir.json"))
    with pytest.raises(ConfigError, match="not a regular file"):
        read_json_file("/dev/null")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_system(str(write(tmp_path, "{")))
    with pytest.raises(ConfigError, match="not UTF-8"):
        parse_json(b'{"a": "\xff"}', "x")
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000, "x")


@pytest.mark.parametrize(
    "template",
    ["c{c.__class__}", "c{c.__class__.__mro__}", "{c[0]}", "{c!r}", "{c:>10}", "{}", "{0}", "{d}", "c{c",
     "c}"],
)
def test_name_templates_allow_only_plain_fields(template):
    cfg = clusters(2)
    cfg["memories"][1]["name"] = template
    with pytest.raises(ConfigError) as info:
        SystemGraph.from_dict(cfg)
    assert "template" in str(info.value)


def test_name_templates_substitute_and_escape_braces():
    cfg = clusters(3)
    cfg["computes"][0]["kind"] = "{{literal}}-{c}"
    g = SystemGraph.from_dict(cfg)
    assert [c.kind for c in g.computes] == ["{literal}-0", "{literal}-1", "{literal}-2"]
    assert [m.name for m in g.memories] == ["hbm", "c0.rf", "c1.rf", "c2.rf"]


def test_foreach_above_the_limit_is_refused_before_expanding(monkeypatch):
    cfg = clusters(1)
    cfg["memories"][1]["foreach"] = {"a": 100_000, "b": 100_000}  # 10^10 register files
    with pytest.raises(ConfigError, match="foreach expands to 10,000,000,0"):
        SystemGraph.from_dict(cfg)
    with pytest.raises(ConfigError, match="limit of 50"):
        SystemGraph.from_dict(clusters(30), max_nodes=50)
    assert len(SystemGraph.from_dict(clusters(30), max_nodes=200).computes) == 30
    monkeypatch.setenv("TVM_EXT_MAX_SYSTEM_NODES", "50")
    with pytest.raises(ConfigError, match="TVM_EXT_MAX_SYSTEM_NODES"):
        SystemGraph.from_dict(clusters(30))


def test_glob_edges_count_against_the_limit():
    cfg = clusters(40, src="c*.rf", dst="c*.rf", foreach={"c": 1})  # 40 x 40 pairs x 2 directions
    with pytest.raises(ConfigError, match="3,200 edges"):
        SystemGraph.from_dict(cfg, max_nodes=1000)


@pytest.mark.parametrize("foreach", [{"c": 0}, {"c": "2"}, {"c": True}, {"1c": 2}, {}, [2]])
def test_bad_foreach_is_a_config_error(foreach):
    cfg = clusters(2)
    cfg["memories"][1]["foreach"] = foreach
    with pytest.raises(ConfigError, match="foreach"):
        SystemGraph.from_dict(cfg)


def test_large_foreach_within_the_limit_loads():
    g = SystemGraph.from_dict(clusters(5000))
    assert len(g.computes) == 5000 and len(g.edges) == 10_000
    assert g.path("hbm", "c4999.rf")[0].dst == "c4999.rf"
