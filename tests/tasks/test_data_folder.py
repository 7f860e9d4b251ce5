"""The data-folder rule (flag, space, $GLUE_DIR, the hub) and the hub check."""

from __future__ import annotations

import pytest

from istar_tune.errors import DataError
from istar_tune.tasks.data_folder import hub_reachable, resolve_data_dir


def test_the_flag_then_the_space_then_glue_dir(tmp_path, monkeypatch):
    for name in ("flag", "space", "env"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("GLUE_DIR", str(tmp_path / "env"))
    assert resolve_data_dir(None) == tmp_path / "env"
    assert resolve_data_dir(None, tmp_path / "space") == tmp_path / "space"
    assert resolve_data_dir(tmp_path / "flag", tmp_path / "space") == tmp_path / "flag"
    monkeypatch.delenv("GLUE_DIR")
    assert resolve_data_dir(None) is None  # the hub


def test_a_missing_folder_and_a_file_are_named_as_what_they_are(tmp_path):
    with pytest.raises(DataError, match=r"'.*nowhere' \(from --data-dir\) does not exist"):
        resolve_data_dir(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="is a file, not a folder"):
        resolve_data_dir(None, tmp_path / "file")


def test_the_hub_is_not_asked_when_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_reachable(timeout=30) is False
