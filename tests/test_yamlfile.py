"""Reading YAML as people write it: clear errors, YAML 1.2 floats, a key given twice refused, merge keys kept."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.yamlfile import load_yaml


def test_yaml_loading_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_yaml(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_yaml(listing)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")


def test_a_key_given_twice_in_a_yaml_mapping_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("settings:\n  max_length: 64\n  max_length: 32\n")
    with pytest.raises(ConfigError, match="line 3: key 'max_length' is given twice in one mapping"):
        load_yaml(path)


def test_yaml_merge_keys_still_merge_and_may_be_overridden(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("base: &b {epochs: 2, learning_rate: 1.0e-4}\nrun:\n  <<: *b\n  learning_rate: 3.0e-4\n")
    assert load_yaml(path)["run"] == {"epochs": 2, "learning_rate": 3e-4}


def test_integers_are_read_as_yaml_1_2_writes_them(tmp_path):
    path = tmp_path / "numbers.yaml"
    path.write_text("lead: 010\nclock: 1:30\nunderscored: 1_000\noctal: 0o17\nhex: 0x1A\nsigned: -5\nplus: +7\n"
                    "float: 1e3\nflag: yes\n")
    assert load_yaml(path) == {"lead": 10, "clock": "1:30", "underscored": "1_000", "octal": 15, "hex": 26,
                               "signed": -5, "plus": 7, "float": 1000.0, "flag": True}  # YAML 1.1: 8, 90, 1000
