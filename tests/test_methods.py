"""The methods table: what each method uses, its defaults and labels, and unknown names refused."""

from __future__ import annotations

import pytest

from istar_tune.config import Hyperparameters, trial_epochs
from istar_tune.errors import ConfigError
from istar_tune.methods import (
    BASELINE,
    METHODS,
    PAPER_METHOD,
    PENALISED,
    get_method,
    has_second_stage,
    label,
    uses_lambda,
    uses_zeta,
)


def test_the_four_methods_and_what_they_use():
    assert list(METHODS) == ["base", "cosreg", "istar", "isolayer"]
    assert PENALISED == ("cosreg", "istar") and BASELINE == "base" and PAPER_METHOD == "istar"
    assert uses_zeta("istar") and not uses_zeta("cosreg") and uses_lambda("cosreg") and not uses_lambda("base")
    assert has_second_stage("isolayer") and not has_second_stage("istar")
    assert get_method("cosreg").default_lambda == 1.0 and get_method("istar").default_lambda == -1.0


def test_labels_and_unknown_names():
    assert label("istar") == "I-STAR" and label("something") == "something"
    assert get_method(" ISTAR ").name == "istar"
    with pytest.raises(ConfigError, match="unknown method 'whiten': choose one of base, cosreg, istar, isolayer"):
        get_method("whiten")
    assert not uses_lambda("whiten") and not has_second_stage("whiten")


def test_a_trial_reports_its_epochs_and_a_second_stage_adds_its_own():
    assert trial_epochs({"method": "istar", "epochs": 3}) == 3
    assert trial_epochs({"method": "isolayer", "epochs": 3, "isolayer_epochs": 2}) == 5
    assert trial_epochs({}) == Hyperparameters.epochs  # defaults filled in
