"""The error hierarchy: every error the CLI turns into one line is an IstarTuneError; a ConfigError keeps every
problem."""

from __future__ import annotations

import pytest

from istar_tune.errors import (
    ConfigError,
    DataError,
    IsotropyError,
    IstarTuneError,
    ModelError,
    TrainingError,
    repeated,
    storage_failure,
)


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


def test_repeated_names_each_value_given_more_than_once_once_sorted():
    assert repeated(["rte", "sst2", "rte", "cola", "sst2", "rte"]) == ["rte", "sst2"]
    assert repeated(iter([3, 1, 3])) == [3] and repeated([]) == [] and repeated(["a", "b"]) == []


@pytest.mark.parametrize(("text", "cause"), [
    ("OSError: [Errno 28] No space left on device: '/runs/x'", "no space left on the storage device"),
    ("sqlite3.OperationalError: database or disk is full", "no space left on the storage device"),
    ("OSError: [Errno 122] Disk quota exceeded", "no space left on the storage device"),
    ("OSError: [Errno 30] Read-only file system: '/runs/x'", "the storage device is read-only"),
    ("sqlite3.OperationalError: attempt to write a readonly database", "the storage device is read-only"),
    ("TrainingError: the loss became nan at epoch 1", ""),
    ("", ""),
])
def test_a_storage_failure_is_told_from_other_errors(text, cause):
    assert storage_failure(text) == cause


def test_unknown_keys_are_one_problem_with_a_close_key_for_a_typo():
    from istar_tune.errors import unknown_keys

    where, text = unknown_keys(["max_len"], ["max_length", "seed"])
    assert (where, text) == ("max_len", "unknown key (max_len: did you mean max_length?) (known: max_length, seed)")
    where, text = unknown_keys([f"k{i}" for i in range(500)], ["seed"])
    assert where == "k0, k1, k2, k3, k4, k5, k6, k7, k8, k9 and 490 more"
    assert text == "unknown keys (known: seed)"  # the known keys once, not once a key
