"""One search at a time per results folder, and --resume only of the plan the search started with."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search import guard
from istar_tune.search.plan import plan
from istar_tune.search.spaces.space import Domain, SearchSpace


def _space(rates=(1e-5, 2e-5)) -> SearchSpace:
    return SearchSpace(path="s.yaml", name="s", models=("bert",), tasks=("rte",), methods=("base",),
                       hyperparameters={"learning_rate": Domain("grid", tuple(rates))})


def test_a_second_search_of_the_same_folder_is_refused_naming_the_first(tmp_path):
    first = guard.hold(str(tmp_path), "s")
    with pytest.raises(ConfigError, match=r"search 's' in .* is already running \(pid \d+ on .*, since "):
        guard.hold(str(tmp_path), "s")
    other = guard.hold(str(tmp_path), "another")  # another search's folder: free
    first.release()
    guard.hold(str(tmp_path), "s").release()  # free again once the first ended
    other.release()
    assert guard.hold("s3://bucket/runs", "s").path is None  # remote storage: no local lock


def test_resume_refuses_a_changed_plan_unless_asked_to_go_on(tmp_path):
    root = str(tmp_path / "s")
    started = guard.fingerprint([_space()], {"s": plan(_space())})
    guard.check_plan(root, started, resume=False)
    guard.check_plan(root, started, resume=True)  # the same plan: fine
    changed = guard.fingerprint([_space((1e-5, 2e-5, 3e-5))], {"s": plan(_space((1e-5, 2e-5, 3e-5)))})
    with pytest.raises(ConfigError, match="--resume: the search space of s changed since the search started"):
        guard.check_plan(root, changed, resume=True)
    started_again = guard.check_plan(root, changed, resume=True, accept_changed=True)
    planned = {"s": plan(_space((1e-5, 2e-5, 3e-5)))}
    guard.keep_started(planned, started_again)
    assert [p.trials for p in planned["s"]] == [2]  # the grid the search started with
    assert (tmp_path / "s" / guard.PLAN_FILE).read_text() == __import__("json").dumps(started, sort_keys=True,
                                                                                      default=str)


def test_a_search_started_under_an_earlier_backend_name_resumes_under_the_new_one(tmp_path):
    import json

    root = tmp_path / "s"
    now = guard.fingerprint([_space()], {"s": plan(_space())})
    before = {name: {**search, "algorithm": "optuna"} for name, search in now.items()}
    now = {name: {**search, "algorithm": "tpe"} for name, search in now.items()}
    root.mkdir()
    (root / guard.PLAN_FILE).write_text(json.dumps(before, sort_keys=True, default=str))
    guard.check_plan(str(root), now, resume=True)  # the same plan under the backend's current name
    with pytest.raises(ConfigError, match="changed since the search started"):
        guard.check_plan(str(root), {n: {**s, "algorithm": "qmc"} for n, s in now.items()}, resume=True)


def test_resume_refuses_a_data_file_changed_since_the_search_started(tmp_path):
    from istar_tune.tasks import Task

    root = str(tmp_path / "runs" / "s")
    task = Task(name="t", display_name="t", problem_type="classification", metric="accuracy",
                files={"train": "/d/train.csv", "validation": "/d/dev.csv"},
                checksums={"train": "sha256:aa", "validation": "sha256:cc"})
    guard.check_data_files(root, [task], resume=False)
    guard.check_data_files(root, [task], resume=True)  # the same files: it goes on
    changed = Task(**{**task.__dict__, "checksums": {"train": "sha256:bb", "validation": "sha256:cc"}})
    with pytest.raises(ConfigError, match="--resume: task t's train file /d/train.csv \\(sha256:aa, now sha256:bb\\) "
                                          "changed since the search started: .*restore it, or start a new search"):
        guard.check_data_files(root, [changed], resume=True)
