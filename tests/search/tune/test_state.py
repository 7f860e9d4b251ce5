from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import ray.cloudpickle as cloudpickle
from ray.tune.search import Searcher

from istar_tune.errors import ConfigError
from istar_tune.search.tune import state
from istar_tune.search.tune.searcher import GroupQueue, GroupSearcher

CONFIGS = [{"model": "bert", "task": "rte", "method": "base", "learning_rate": r} for r in (1e-5, 2e-5, 3e-5, 4e-5)]


def _order() -> list[dict]:
    searcher = GroupSearcher([GroupQueue(key="g", configs=[dict(c) for c in CONFIGS])])
    return [searcher.suggest(f"t{i}") for i in range(len(CONFIGS))]


def _write(folder: Path, session: str, trials: list[str], handed: int | None = None) -> GroupSearcher:
    """Tune's state files as a search leaves them: ``trials`` in the experiment state, the searcher having handed
    out ``handed`` trials (default: as many)."""
    searcher = GroupSearcher([GroupQueue(key="g", configs=[dict(c) for c in CONFIGS])])
    for index in range(len(trials) if handed is None else handed):
        searcher.suggest(f"t{index}")
    folder.mkdir(parents=True, exist_ok=True)
    rows = [[json.dumps({"trial_id": t, "config": {}}), json.dumps({"last_result_time": -float("inf")})]
            for t in trials]
    (folder / f"experiment_state-{session}.json").write_text(
        json.dumps({"trial_data": rows, "runner_data": {}, "stats": {"start_time": 0.0}}))  # Tune's order
    (folder / f"search_gen_state-{session}.json").write_bytes(cloudpickle.dumps({"counter": len(trials)}))
    searcher.save(str(folder / f"searcher-state-{session}.pkl"))
    (folder / "tuner.pkl").write_bytes(cloudpickle.dumps({"tuner": 1}))
    return searcher


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def test_a_whole_state_reads_back_with_its_trials_and_what_its_searcher_handed_out(tmp_path):
    _write(tmp_path, "2026-01-01_00-00-00", ["t0", "t1"])
    read = state.read(tmp_path)
    assert read.trials == {"t0", "t1"} and read.handed == {"t0", "t1"} and read.agrees
    _write(tmp_path, "2026-01-01_00-00-01", ["t0", "t1", "t2"])  # a resumed driver's session: the newest counts
    assert state.read(tmp_path).trials == {"t0", "t1", "t2"}


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("kind", ["experiment_state", "search_gen_state", "searcher-state", "tuner"])
def test_a_state_file_cut_short_is_named_with_its_size(tmp_path, kind, quick):
    _write(tmp_path, "s", ["t0", "t1"])
    assert state.read(tmp_path, quick=quick).trials == {"t0", "t1"}
    path = next(tmp_path.glob(f"{kind}*"))
    _cut(path)
    said = state.read(tmp_path, quick=quick)
    assert isinstance(said, str) and said.startswith(f"{path.name} ({path.stat().st_size:,} bytes) does not read back")


def test_the_copier_keeps_the_newest_whole_state_and_not_one_cut_short(tmp_path):
    copier = state.StateCopier(str(tmp_path))
    _write(tmp_path, "s", ["t0"])
    assert copier.copy() and state.read(tmp_path / state.COPY).trials == {"t0"}
    assert not copier.copy()  # unchanged: nothing to do
    _write(tmp_path, "s", ["t0", "t1"])
    os.utime(tmp_path / "experiment_state-s.json", ns=(1, 1))
    assert copier.copy() and state.read(tmp_path / state.COPY).trials == {"t0", "t1"}
    _write(tmp_path, "s", ["t0", "t1", "t2"])
    _cut(tmp_path / "experiment_state-s.json")
    assert not copier.copy() and state.read(tmp_path / state.COPY).trials == {"t0", "t1"}
    _write(tmp_path, "s", ["t0", "t1", "t2"], handed=4)  # the searcher ran ahead: not a state to copy
    assert not copier.copy() and state.read(tmp_path / state.COPY).trials == {"t0", "t1"}


def test_a_copy_cut_while_it_was_taken_never_replaces_the_whole_one(tmp_path, monkeypatch):
    copier = state.StateCopier(str(tmp_path))
    _write(tmp_path, "s", ["t0"])
    assert copier.copy()
    _write(tmp_path, "s", ["t0", "t1"])
    os.utime(tmp_path / "experiment_state-s.json", ns=(3, 3))
    copy2 = state.shutil.copy2

    def cut_while_copying(source, target):  # Tune rewrites the file between the check and the copy
        copy2(source, target)
        if Path(target).name.startswith("experiment_state"):
            _cut(Path(target))

    monkeypatch.setattr(state.shutil, "copy2", cut_while_copying)
    assert not copier.copy() and state.read(tmp_path / state.COPY).trials == {"t0"}


def test_resume_puts_the_whole_copy_back_in_place_of_a_state_cut_short_and_sets_that_aside(tmp_path):
    _write(tmp_path, "s", ["t0", "t1"])
    state.StateCopier(str(tmp_path)).copy()
    _write(tmp_path, "s", ["t0", "t1", "t2"])
    _cut(tmp_path / "experiment_state-s.json")
    said = []
    assert state.repair(str(tmp_path), said.append) == {"t0", "t1"}
    assert len(said) == 1 and "cut short (experiment_state-s.json (" in said[0] and "2 trials" in said[0]
    assert state.read(tmp_path).trials == {"t0", "t1"}
    aside = next(tmp_path.glob(f"{state.SET_ASIDE}-*"))
    assert sorted(p.name for p in aside.iterdir()) == sorted(
        ["experiment_state-s.json", "search_gen_state-s.json", "searcher-state-s.pkl", "tuner.pkl"])
    restored = GroupSearcher.__new__(GroupSearcher)
    restored.restore(str(tmp_path / "searcher-state-s.pkl"))
    assert restored.suggest("t2") == _order()[2]  # the copy's searcher hands out what came after it again


def test_resume_gives_the_searcher_back_what_it_handed_to_trials_the_state_does_not_hold(tmp_path):
    _write(tmp_path, "s", ["t0", "t1"], handed=3)
    said = []
    assert state.repair(str(tmp_path), said.append) == {"t0", "t1"}
    assert "holds 2 trials but its searcher had handed out 3" in said[0] and "the 1 missing run again" in said[0]
    assert state.read(tmp_path).agrees
    restored = GroupSearcher.__new__(GroupSearcher)
    restored.restore(str(tmp_path / "searcher-state-s.pkl"))
    assert [restored.suggest("a"), restored.suggest("b"), restored.suggest("c")] == [*_order()[2:], Searcher.FINISHED]


def test_resume_leaves_a_whole_state_alone_and_refuses_a_cut_one_without_a_copy(tmp_path):
    _write(tmp_path, "s", ["t0"])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert state.repair(str(tmp_path), print) == {"t0"}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    _cut(tmp_path / "experiment_state-s.json")
    with pytest.raises(ConfigError, match=r"cannot be restored \(experiment_state-s.json .* no whole copy.*--name"):
        state.repair(str(tmp_path), print)
    assert state.repair(str(tmp_path / "never-written"), print) == set()  # no state: every trial starts again
    assert state.repair("s3://bucket/runs/search", print) is None


def test_resume_with_an_empty_state_and_nothing_finished_starts_again_as_with_no_state(tmp_path):
    """The driver stopped as Tune began writing its state: a 0-byte file that no restore reads. With no trial
    finished, the search starts again (the file set aside); with one finished, a restart would train it again: refused
    as a state cut short."""
    _write(tmp_path, "s", ["t0"])
    (tmp_path / "experiment_state-s.json").write_bytes(b"")
    (tmp_path / "trial_t0").mkdir()
    (tmp_path / "trial_t0" / "result.json").write_text('{"epoch": 1, "done": false}\n')
    said = []
    assert state.repair(str(tmp_path), said.append) == set()
    assert "is empty (0 bytes" in said[0] and "starts again as with no state" in said[0]
    aside = next(tmp_path.glob(f"{state.SET_ASIDE}-*"))
    assert (aside / "experiment_state-s.json").stat().st_size == 0 and not list(tmp_path.glob("experiment_state-*"))
    _write(tmp_path / "done", "s", ["t0"])
    (tmp_path / "done" / "experiment_state-s.json").write_bytes(b"")
    (tmp_path / "done" / "trial_t0").mkdir()
    (tmp_path / "done" / "trial_t0" / "result.json").write_text('{"epoch": 1, "done": true}\n')
    with pytest.raises(ConfigError, match="cannot be restored"):
        state.repair(str(tmp_path / "done"), print)


def test_the_copier_copies_in_its_own_thread_and_once_more_at_the_end(tmp_path):
    copier = state.StateCopier(str(tmp_path), every_s=3600)
    _write(tmp_path, "s", ["t0"])
    copier.on_step_end(iteration=1, trials=[])
    copier._thread.join(timeout=30)
    assert state.read(tmp_path / state.COPY).trials == {"t0"}
    _write(tmp_path, "s", ["t0", "t1"])
    os.utime(tmp_path / "experiment_state-s.json", ns=(2, 2))
    copier.on_step_end(iteration=2, trials=[])  # within every_s: no new copy
    assert copier._thread.is_alive() is False and state.read(tmp_path / state.COPY).trials == {"t0"}
    copier.on_experiment_end(trials=[])
    assert state.read(tmp_path / state.COPY).trials == {"t0", "t1"}
    assert pickle.loads(pickle.dumps(copier)).root == tmp_path  # Tune keeps its callbacks with the experiment
