"""The configuration reference is generated from the field docstrings: every field, its flag and its default."""

from __future__ import annotations

from dataclasses import fields

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.reference import NEGATED_FLAGS, configuration_reference, field_docs
from istar_tune.search.spaces.file import SPACE_KEYS


def test_every_field_and_space_key_is_in_the_reference_with_its_flag():
    text = configuration_reference()
    for cls in (Hyperparameters, RunSettings):
        for f in fields(cls):
            flag = ("--no-" if f.name in NEGATED_FLAGS else "--") + f.name.replace("_", "-")
            assert f"| `{f.name}` | `{flag}` | `{f.default}` |" in text
    for key in SPACE_KEYS:
        assert f"| `{key}` |" in text


def test_field_docs_read_the_docstring_under_each_field():
    docs = field_docs(RunSettings)
    assert set(docs) == {f.name for f in fields(RunSettings)}, "every run setting needs a docstring"
    assert all(docs.values()) and all("\n" not in d for d in docs.values())
