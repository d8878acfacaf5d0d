"""Which configurations ``clew eval`` runs for --config, --preset and --ablate."""

from __future__ import annotations

from clew.config import EngineConfig, preset_config
from clew.eval.runner import CONFIG_ROW, configs_for


def tuned() -> EngineConfig:
    """What a user's YAML file gives: a retrieval section and another one changed."""
    return EngineConfig.from_dict(
        {"fusion": {"title_identifier": 0.5}, "assemble": {"token_budget": 700}}
    )


def test_a_config_alone_is_evaluated_as_written() -> None:
    rows = configs_for([], False, tuned())
    assert [name for name, _ in rows] == [CONFIG_ROW]
    cfg = rows[0][1]
    assert cfg.fusion.title_identifier == 0.5 and cfg.assemble.token_budget == 700


def test_with_presets_each_row_keeps_its_retrieval_sections_and_takes_the_rest() -> None:
    rows = dict(configs_for(["default", "hybrid"], False, tuned()))
    assert list(rows) == ["default", "hybrid"]
    for name, cfg in rows.items():
        assert cfg.fusion == preset_config(name).fusion
        assert cfg.assemble.token_budget == 700


def test_no_config_runs_the_default_preset() -> None:
    rows = configs_for([], False, None)
    assert [name for name, _ in rows] == ["default"] and rows[0][1] == preset_config("default")
