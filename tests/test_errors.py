"""The error hierarchy: every error the CLI turns into one line is an IstarTuneError; a ConfigError keeps every
problem."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError, DataError, IsotropyError, IstarTuneError, ModelError, TrainingError


def test_a_config_error_lists_every_problem_on_one_line():
    err = ConfigError(["a: must be positive, got -1", "b: unknown key"])
    assert err.problems == ["a: must be positive, got -1", "b: unknown key"]
    assert str(err) == "a: must be positive, got -1; b: unknown key" and "\n" not in str(err)
    assert ConfigError("one").problems == ["one"]


@pytest.mark.parametrize("kind", [ConfigError, DataError, ModelError, IsotropyError, TrainingError])
def test_every_error_is_caught_as_an_istar_tune_error(kind):
    with pytest.raises(IstarTuneError):
        raise kind("x")


def test_config_and_isotropy_errors_are_value_errors_too():
    assert issubclass(ConfigError, ValueError) and issubclass(IsotropyError, ValueError)
