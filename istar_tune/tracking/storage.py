"""Where a search's results and records go, each resolved by one rule (flag, then environment, then default):

* the storage path of Ray's results and checkpoints: ``--storage-path``, else ``$ISTAR_TUNE_STORAGE_PATH``, else
  ``istar-runs``; a local folder, or a URI (``s3://...``) every node of a cluster reaches;
* the MLflow tracking URI: ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///STORAGE/mlflow.db``
  (a local storage path only; a remote one needs a tracking server);
* where artifacts go: through the tracking server when it is one, else a folder beside a local store.

(The data folder has its own single rule: :func:`istar_tune.tasks.data_folder.resolve_data_dir`.)
"""

from __future__ import annotations

import os
from pathlib import Path

from istar_tune.errors import ConfigError

STORAGE_ENV = "ISTAR_TUNE_STORAGE_PATH"
TRACKING_ENV = "MLFLOW_TRACKING_URI"
DEFAULT_STORAGE = "istar-runs"


def is_remote(path: str | os.PathLike) -> bool:
    """Whether a storage path is a URI (``s3://``, ``gs://``, ...) rather than a local folder."""
    return "://" in str(path)


def storage_root(path: str | os.PathLike | None = None) -> str:
    """The storage path: ``path``, else ``$ISTAR_TUNE_STORAGE_PATH``, else ``istar-runs``; a local one absolute."""
    chosen = str(path) if path not in (None, "") else os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE
    if is_remote(chosen):
        return chosen
    try:
        return str(Path(chosen).expanduser().resolve())
    except (OSError, RuntimeError) as err:  # a symlink loop (RuntimeError before Python 3.13)
        raise ConfigError(f"storage path {chosen!r} cannot be resolved ({err}): give a real folder") from None


def join(root: str, child: str) -> str:
    """``root/child`` for a folder or a URI."""
    return f"{root.rstrip('/')}/{child}" if is_remote(root) else str(Path(root) / child)


def tracking_uri(uri: str | None, storage: str | os.PathLike | None = None) -> str:
    """The MLflow tracking URI: ``uri``, else ``$MLFLOW_TRACKING_URI``, else a sqlite store under the storage path."""
    chosen = uri or os.environ.get(TRACKING_ENV)
    if chosen:
        return chosen
    return default_tracking_uri(storage_root(storage))


def default_tracking_uri(storage: str | os.PathLike) -> str:
    """``sqlite:///<storage>/mlflow.db`` for a local storage path."""
    if is_remote(storage):
        raise ConfigError(f"storage path {str(storage)!r} is remote: give --tracking-uri (or {TRACKING_ENV}) of an "
                          "MLflow server every node reaches")
    return f"sqlite:///{Path(storage).expanduser().resolve() / 'mlflow.db'}"


def is_server(uri: str) -> bool:
    """Whether a tracking URI names a tracking server (which stores and serves artifacts itself)."""
    return uri.startswith(("http://", "https://", "databricks"))


def artifact_root(uri: str, storage: str) -> str | None:
    """Where a new experiment keeps artifacts: ``None`` (the server's proxied artifact store) with a tracking server
    or a remote storage path, else ``STORAGE/mlartifacts`` beside the local store."""
    if is_server(uri) or is_remote(storage):
        return None
    return str(Path(storage) / "mlartifacts")


def unwritable(path: str | os.PathLike) -> str:
    """Why ``path`` (a folder or file, existing or not) could not be written or created, read from its nearest
    existing ancestor without creating anything; empty when it can."""
    path = Path(path)
    for existing in (path, *path.parents):
        if existing.exists():
            if existing != path and not existing.is_dir():
                return f"{existing} is a file"
            return "" if os.access(existing, os.W_OK) else f"{existing} is not writable"
    return ""
