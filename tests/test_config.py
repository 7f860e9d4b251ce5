from __future__ import annotations

import pytest

from istar_tune.config import Hyperparameters, RunSettings, from_dict, split_config
from istar_tune.errors import ConfigError


def test_strings_from_the_command_line_are_coerced():
    hp = from_dict(Hyperparameters, {"learning_rate": "1e-4", "batch_size": "16", "lam": "-5", "zeta": "0.2"})
    assert (hp.learning_rate, hp.batch_size, hp.lam, hp.zeta) == (1e-4, 16, -5.0, 0.2)


def test_every_problem_is_reported_together():
    with pytest.raises(ConfigError) as err:
        split_config({"task": "mnli", "lam": "abc", "zeta": 1.5, "batch_size": 0, "colour": "red",
                      "precision": "fp8"}, source="run.yaml")
    text = str(err.value)
    for expected in ("colour: unknown key", "lam must be a number, got 'abc'", "precision must be one of"):
        assert expected in text
    with pytest.raises(ConfigError) as err:
        from_dict(Hyperparameters, {"task": "", "zeta": 1.5, "batch_size": 0})
    assert len(err.value.problems) == 3 and "task must not be empty" in str(err.value)
    assert "zeta must lie in [0, 1], got 1.5" in str(err.value)


def test_method_default_lambda():
    assert Hyperparameters(method="cosreg").penalty_weight == 1.0
    assert Hyperparameters(method="base").penalty_weight == 0.0
    assert Hyperparameters(method="istar", lam=5).penalty_weight == 5.0


def _float_fields(cls) -> list[str]:
    import typing
    from dataclasses import fields

    hints = typing.get_type_hints(cls)
    return [f.name for f in fields(cls) if hints[f.name] in (float, float | None)]


@pytest.mark.parametrize("cls", [Hyperparameters, RunSettings])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_every_float_setting_refuses_nan_and_infinity(cls, value):
    names = _float_fields(cls)
    assert len(names) >= 3  # learning rates, λ, ζ, α, ... / max_grad_norm, eval_zeta, holdout
    for name in names:
        with pytest.raises(ConfigError, match=f"{name} must be a finite number"):
            from_dict(cls, {name: value})


def test_max_length_leaves_room_for_text():
    with pytest.raises(ConfigError, match="max_length must be at least 8"):
        from_dict(RunSettings, {"max_length": 3})
    assert from_dict(RunSettings, {"max_length": 8}).max_length == 8


def test_a_path_is_taken_as_its_text(tmp_path):
    assert from_dict(RunSettings, {"data_dir": tmp_path}).data_dir == str(tmp_path)
