"""The configuration reference is generated from the field docstrings: every field, its flag and its default."""

from __future__ import annotations

from dataclasses import fields

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.reference import NEGATED_FLAGS, configuration_reference
from istar_tune.search.spaces.file import SPACE_KEYS


def test_every_field_and_space_key_is_in_the_reference_with_its_flag():
    text = configuration_reference()
    for cls in (Hyperparameters, RunSettings):
        for f in fields(cls):
            flag = ("--no-" if f.name in NEGATED_FLAGS else "--") + f.name.replace("_", "-")
            assert f"| `{f.name}` | `{flag}` | `{f.default}` |" in text
    for key in SPACE_KEYS:
        assert f"| `{key}` |" in text


def test_a_space_that_sets_nothing_gets_each_fields_default_and_every_field_is_documented(tmp_path):
    from istar_tune.docstrings import field_docs as docs_of
    from istar_tune.search.spaces.file import load_search_space
    from istar_tune.search.spaces.space import SearchSpace, space_default

    assert set(docs_of(SearchSpace)) == {f.name for f in fields(SearchSpace)}, "every space field needs a docstring"
    path = tmp_path / "minimal.yaml"
    path.write_text("tasks: [rte]\nmethods: [base]\nhyperparameters: {learning_rate: 2.0e-5}\n", encoding="utf-8")
    space = load_search_space(path)
    given = {"name", "models", "tasks", "methods", "hyperparameters"}
    for name, _shown, _ in SPACE_KEYS.values():
        if name not in given:
            assert getattr(space, name) == space_default(name), name
    assert SPACE_KEYS["search.storage"][0] == "study_storage" and SPACE_KEYS["resources.gpu"][1] == "0"
    assert SPACE_KEYS["models"][1] == ", ".join(space.models)  # the default list, shown as the loader uses it
