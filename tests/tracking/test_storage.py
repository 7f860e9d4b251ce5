"""Where results go: the storage path and tracking URI rules (flag, then environment, then the default)."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.tracking.storage import (
    DEFAULT_STORAGE,
    STORAGE_ENV,
    TRACKING_ENV,
    artifact_root,
    default_tracking_uri,
    is_remote,
    join,
    storage_root,
    tracking_uri,
)


def test_the_storage_path_is_the_flag_then_the_environment_then_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert storage_root() == str(tmp_path / DEFAULT_STORAGE)
    monkeypatch.setenv(STORAGE_ENV, str(tmp_path / "env"))
    assert storage_root() == str(tmp_path / "env")
    assert storage_root("given") == str(tmp_path / "given")
    assert storage_root("s3://bucket/runs") == "s3://bucket/runs"


def test_the_tracking_uri_is_the_flag_then_the_environment_then_a_store_under_the_storage_path(tmp_path, monkeypatch):
    monkeypatch.delenv(TRACKING_ENV, raising=False)
    assert tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv(TRACKING_ENV, "http://127.0.0.1:5000")
    assert tracking_uri(None, tmp_path) == "http://127.0.0.1:5000"
    assert tracking_uri("sqlite:///x.db", tmp_path) == "sqlite:///x.db"
    with pytest.raises(ConfigError, match="remote"):
        default_tracking_uri("s3://bucket/runs")


def test_remote_paths_join_as_uris_and_servers_keep_their_artifacts(tmp_path):
    assert is_remote("gs://b/x") and not is_remote(tmp_path)
    assert join("s3://b/runs/", "smoke") == "s3://b/runs/smoke" and join(str(tmp_path), "s") == str(tmp_path / "s")
    assert artifact_root("http://127.0.0.1:5000", str(tmp_path)) is None
    assert artifact_root(f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path)) == str(tmp_path / "mlartifacts")


def test_unwritable_reads_the_nearest_existing_folder_and_creates_nothing(tmp_path):
    from istar_tune.tracking.storage import unwritable

    (tmp_path / "file").write_text("x")
    assert unwritable(tmp_path / "new" / "deeper") == "" and not (tmp_path / "new").exists()
    assert unwritable(tmp_path / "file" / "runs") == f"{tmp_path / 'file'} is a file"
