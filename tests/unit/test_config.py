from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from clew.config import PRESETS, EngineConfig, preset_config
from clew.errors import ConfigError


def test_presets_are_frozen_and_named() -> None:
    assert {"default", "hybrid", "lexical", "dense", "graph"} <= set(PRESETS)
    assert preset_config("lexical").fusion.weights() == {"lexical": 1.0, "dense": 0.0, "graph": 0.0}
    with pytest.raises(FrozenInstanceError):
        PRESETS["default"].fusion.rrf_k = 1  # type: ignore[misc]


def test_unknown_preset_lists_allowed() -> None:
    with pytest.raises(ConfigError, match=r"unknown preset 'fast'; allowed: default, dense"):
        preset_config("fast")


def test_validation_names_value_and_range() -> None:
    with pytest.raises(ConfigError, match=r"graph.max_hops=3 is invalid; allowed: 1 or 2"):
        EngineConfig().with_overrides(graph={"max_hops": 3})
    with pytest.raises(ConfigError, match=r"graph.related_weighting='tf' .*allowed: count, pmi"):
        EngineConfig().with_overrides(graph={"related_weighting": "tf"})
    with pytest.raises(ConfigError, match=r"unknown config field 'fusion\.rrfk'"):
        EngineConfig().with_overrides(fusion={"rrfk": 1})
    with pytest.raises(ConfigError, match="has type str"):
        EngineConfig().with_overrides(search={"k": "10"})


def test_yaml_loads_on_top_of_a_preset(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("preset: hybrid\nfusion:\n  rrf_k: 10\nlexical: {k1: 1.2}\n")
    cfg = EngineConfig.from_yaml(f)
    assert cfg.fusion.rrf_k == 10 and cfg.fusion.graph_weight == 0.0
    assert cfg.lexical.k1 == 1.2
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg


def test_yaml_reads_exponent_floats_without_a_dot(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("graph: {ppr_epsilon: 3e-4, damping: .75}\nlexical: {k1: 1.2E+0}\n")
    cfg = EngineConfig.from_yaml(f)
    assert cfg.graph.ppr_epsilon == pytest.approx(3e-4) and cfg.graph.damping == 0.75
    assert cfg.lexical.k1 == pytest.approx(1.2)
    f.write_text("graph: {ppr_epsilon: 1e-x}\n")  # not a number: still the clear type error
    with pytest.raises(ConfigError, match="ppr_epsilon='1e-x' has type str; allowed: float"):
        EngineConfig.from_yaml(f)
