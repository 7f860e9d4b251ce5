"""A new sqlite store as a copy of an empty one: MLflow builds a new store by running every one of its schema
migrations (4 s on an idle core, 10 s on a busy one, for each new ``--storage-path``), so the first store an MLflow
version builds is kept, empty, in the user's cache, and later new stores start as a copy of it (a tenth of a second).
The copy holds MLflow's tables at its newest schema and nothing else: MLflow creates the default experiment when the
store is first opened, as for a store it built itself. A kept store is checked before each copy (sqlite's
``PRAGMA quick_check`` and its schema against the digest recorded when it was built): a damaged one is built again,
never copied. Whatever goes wrong here (another MLflow, a cache that cannot be written, a full disk, a damaged kept
store that cannot be rebuilt) leaves MLflow to build the store itself."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "ISTAR_TUNE_CACHE"
"""The folder of the kept empty stores (default: ``$XDG_CACHE_HOME/istar-tune``, else ``~/.cache/istar-tune``)."""


def cache_folder() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "istar-tune"


def start_from_template(path: Path) -> bool:
    """Put a copy of the kept empty store at ``path`` when no store is there yet (a missing or empty file); True when
    it did. The caller holds the store's lock."""
    if path.exists() and path.stat().st_size:
        return False
    try:
        template = _template()
        if template is None:
            return False
        _copy(template, path)
    except Exception as err:  # noqa: BLE001 — sqlite's, SQLAlchemy's and the disk's errors alike: MLflow builds it
        log.debug("a new store built by MLflow (no copy: %s)", err)
        return False
    return True


def _template() -> Path | None:
    """The kept empty store of this MLflow version at its newest schema, built once; None for an MLflow whose
    building step is not where this reads it."""
    import mlflow
    from mlflow.store.db import utils

    build = getattr(utils, "_initialize_tables", None)
    latest = getattr(utils, "_get_latest_schema_revision", None)
    if build is None or latest is None:
        return None
    revision = latest()
    template = cache_folder() / f"mlflow-{mlflow.__version__}-{revision}.db"
    if template.is_file() and _revision(template) == revision and _healthy(template):
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    handle, building = tempfile.mkstemp(prefix=template.name, suffix=".building", dir=template.parent)
    os.close(handle)
    try:
        _build(build, Path(building))
        if _revision(Path(building)) != revision:
            raise RuntimeError(f"the store built at {building} is not at schema {revision}")
        _digest_file(template).write_text(schema_digest(Path(building)), "utf-8")
        os.replace(building, template)  # whole or not at all, for searches starting together
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(building)
    return template


def _build(build, file: Path) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"sqlite:///{file}")
    try:
        build(engine)
    finally:
        engine.dispose()


def _revision(file: Path) -> str | None:
    """The schema revision a store's ``alembic_version`` table records (None when it records none)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{file}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _digest_file(template: Path) -> Path:
    return template.with_name(template.name + ".schema")


def schema_digest(file: Path) -> str:
    """A digest of a store's schema: every table, index and trigger with its SQL."""
    import hashlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{file}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT type, name, COALESCE(sql, '') FROM sqlite_master ORDER BY type, name").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def _healthy(template: Path) -> bool:
    """sqlite finds no damage in the kept store, and its schema is the one recorded when it was built."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as db:
            checked = db.execute("PRAGMA quick_check").fetchone()
        recorded = _digest_file(template).read_text("utf-8").strip()
        healthy = checked == ("ok",) and schema_digest(template) == recorded
    except (sqlite3.Error, OSError):
        healthy = False
    if not healthy:
        log.info("the kept empty MLflow store %s is damaged or unrecorded: it is built again", template)
    return healthy


def _copy(template: Path, path: Path) -> None:
    """The template copied to ``path`` through a temporary file beside it, so a copy cut short (a full disk) leaves no
    file that looks like a store."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".copying")
    try:
        shutil.copyfile(template, partial)
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
