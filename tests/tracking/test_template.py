from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.tracking import template


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(template.CACHE_ENV, str(folder))
    return folder


def _schema(file: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(file) as db:
        return set(db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall())


def test_a_new_store_starts_as_a_copy_of_the_kept_one_and_mlflow_opens_it(cache, tmp_path):
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    tracking.prepare_store(uri)
    kept = list(cache.glob("mlflow-*.db"))
    assert len(kept) == 1 and not list(cache.glob("*.building"))
    client = tracking.client(uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]  # created on first open, as MLflow does
    experiment = tracking.ensure_experiment(client, "e", str(tmp_path / "artifacts"))
    client.log_metric(client.create_run(experiment).info.run_id, "accuracy", 0.5)
    assert _schema(kept[0]) <= _schema(tmp_path / "results" / "mlflow.db")
    assert not list((tmp_path / "results").glob("*.copying"))

    second = tmp_path / "second" / "mlflow.db"
    assert template.start_from_template(second)
    assert _schema(second) == _schema(kept[0])


def test_a_store_that_exists_is_never_replaced(cache, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.prepare_store(uri)
    client = tracking.client(uri)
    tracking.ensure_experiment(client, "kept", str(tmp_path / "artifacts"))
    assert not template.start_from_template(tmp_path / "mlflow.db")
    tracking.prepare_store(uri)
    assert "kept" in [e.name for e in tracking.client(uri).search_experiments()]


def test_a_kept_store_of_another_schema_is_built_again(cache, tmp_path):
    first = tmp_path / "a.db"
    assert template.start_from_template(first)
    kept = next(cache.glob("mlflow-*.db"))
    with sqlite3.connect(kept) as db:
        db.execute("UPDATE alembic_version SET version_num = 'older'")
    assert template.start_from_template(tmp_path / "b.db")
    assert template._revision(kept) == template._revision(first) != "older"


@pytest.mark.parametrize("damage", ["a table dropped", "garbage pages"])
def test_a_damaged_kept_store_is_built_again_never_copied(cache, tmp_path, damage):
    """A kept store with a table missing, or with garbage over its pages, still names its schema revision: the
    quick check and the recorded schema find it, and the next store is a whole one."""
    first = tmp_path / "a.db"
    assert template.start_from_template(first)
    kept = next(cache.glob("mlflow-*.db"))
    if damage == "a table dropped":
        with sqlite3.connect(kept) as db:
            db.execute("DROP TABLE metrics")
    else:
        data = bytearray(kept.read_bytes())
        data[4096:8192] = b"\xab" * 4096  # the second page and on, not the header
        kept.write_bytes(bytes(data))
    assert not template._healthy(kept)
    second = tmp_path / "b.db"
    assert template.start_from_template(second)
    assert _schema(second) == _schema(first) and template._healthy(kept)  # rebuilt whole
    uri = f"sqlite:///{second}"
    tracking.prepare_store(uri)
    client = tracking.client(uri)
    client.log_metric(client.create_run(tracking.ensure_experiment(client, "e", str(tmp_path / "art"))).info.run_id,
                      "accuracy", 0.5)


def test_a_damaged_store_is_a_systemic_failure_never_retried():
    from istar_tune.errors import storage_failure

    assert "damaged" in storage_failure("sqlite3.DatabaseError: database disk image is malformed")
    assert "damaged" in storage_failure("(sqlite3.OperationalError) no such table: metrics")
    assert storage_failure("(sqlite3.OperationalError) database is locked") == ""  # waits, and is retried


def test_a_full_disk_while_the_kept_store_is_built_leaves_the_building_to_mlflow(cache, tmp_path, monkeypatch):
    """sqlite says a full disk in its own words (an OperationalError, not an OSError): the copy is given up quietly
    and MLflow builds the store."""
    import sqlalchemy

    def full(build, file):
        raise sqlalchemy.exc.OperationalError("CREATE TABLE", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(template, "_build", full)
    store = tmp_path / "results" / "mlflow.db"
    assert not template.start_from_template(store) and not store.exists()
    assert not list(cache.glob("*.building"))


def test_a_cache_that_cannot_be_written_leaves_the_building_to_mlflow(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(template.CACHE_ENV, str(blocked / "cache"))
    store = tmp_path / "results" / "mlflow.db"
    assert not template.start_from_template(store) and not store.exists()
    tracking.prepare_store(f"sqlite:///{store}")
    assert [e.name for e in tracking.client(f"sqlite:///{store}").search_experiments()] == ["Default"]


def test_the_copy_has_the_tables_mlflow_builds_itself(tmp_path):
    """In a process of its own (this suite's stores are copies already): a store MLflow builds and one copied from the
    kept store have the same tables, columns, constraints, indexes and schema revision."""
    script = textwrap.dedent(f"""
        import os, sqlite3
        os.environ["{template.CACHE_ENV}"] = {str(tmp_path / "cache")!r}
        from istar_tune import tracking
        from istar_tune.tracking import template
        built, copied = {str(tmp_path / "built.db")!r}, {str(tmp_path / "copied.db")!r}
        tracking.client("sqlite:///" + built).search_experiments()
        assert template.start_from_template(__import__("pathlib").Path(copied))
        tracking.client("sqlite:///" + copied).search_experiments()
        def schema(file):  # a table's clauses as a set: MLflow's migrations write a table's constraints in any order
            with sqlite3.connect(file) as db:
                rows = db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
            return sorted((kind, name, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                          for kind, name, sql in rows)
        assert schema(built) == schema(copied), "schemas differ"
        assert template._revision(built) == template._revision(copied) is not None
        print("same")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "same", done.stderr[-2000:]
