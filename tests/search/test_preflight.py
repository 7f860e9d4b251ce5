"""The checks before a search starts anything: each returns its problems, and run_checks raises them all at once."""

from __future__ import annotations

import time

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search import preflight


def test_storage_that_is_a_file_or_not_writable_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    assert preflight.check_storage(str(tmp_path / "new" / "runs")) == []
    assert "is a file" in preflight.check_storage(str(tmp_path / "file" / "runs"))[0]
    assert preflight.check_storage("s3://bucket/runs") == []


def test_tracking_uris_with_an_unknown_scheme_or_a_silent_server_are_refused():
    assert "unknown scheme" in preflight.check_tracking("ftp://host/x")[0]
    assert "cannot reach" in preflight.check_tracking("http://127.0.0.1:9")[0]
    assert preflight.check_tracking("sqlite:///anywhere.db") == []


def test_data_is_parsed_as_the_trials_read_it(glue_tiny, tmp_path):
    assert preflight.check_data(["rte", "sst2"], str(glue_tiny)) == []
    (tmp_path / "RTE").mkdir()
    problems = preflight.check_data(["rte"], str(tmp_path))
    assert len(problems) == 1 and "RTE" in problems[0]


def test_without_a_data_folder_an_unreachable_hub_stops_the_search_in_seconds(tmp_path, monkeypatch, capsys):
    import time

    import ray

    from istar_tune.cli import main

    monkeypatch.delenv("GLUE_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as a machine without internet answers, without waiting for it
    assert "the Hugging Face hub does not answer" in preflight.check_data(["rte"], None)[0]
    space = tmp_path / "space.yaml"
    space.write_text("models: [tiny-bert]\ntasks: [rte]\nmethods: [base]\nhyperparameters: {epochs: 1}\n")
    began = time.monotonic()
    assert main(["search", str(space), "--storage-path", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - began < 20 and "\n" not in err and "give --data-dir DIR" in err
    assert not ray.is_initialized() and not (tmp_path / "runs").exists()


def test_an_unreachable_cluster_address_is_one_line_within_seconds(tmp_path, monkeypatch, capsys):
    import time

    from istar_tune.cli import main
    from istar_tune.search.cluster import check_reachable

    with pytest.raises(ConfigError, match="is not a cluster address"):
        check_reachable("nonsense", "--address")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # nothing listens on port 9
    began = time.monotonic()
    assert main(["search", "smoke", "--storage-path", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - began < 30 and "\n" not in err
    assert "cannot reach the Ray cluster at 127.0.0.1:9 (RAY_ADDRESS)" in err


def test_a_max_length_past_the_models_positions_is_refused():
    assert preflight.check_models(["tiny-bert"], 32) == []
    assert "positions" in preflight.check_models(["tiny-bert"], 100_000)[0]


def test_resources_no_node_can_hold_are_refused_with_what_the_cluster_has():
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}}, {"Alive": False, "Resources": {"GPU": 8.0}}]
    assert preflight.check_resources(1, 1, nodes) == []
    problem = preflight.check_resources(1, 2, nodes)[0]
    assert "1 GPU(s) in 1 node(s)" in problem


def test_run_checks_raises_every_problem_together():
    with pytest.raises(ConfigError) as err:
        preflight.run_checks([("a", lambda: ["first"]), ("b", lambda: []), ("c", lambda: ["second"])])
    assert err.value.problems == ["first", "second"]
    took = preflight.run_checks([("a", lambda: time.sleep(0.3) or []), ("b", lambda: [])])
    assert 0.3 <= took < 5  # the seconds the checks took, the sleep included


def test_a_task_definition_is_resolved_and_returned_for_its_trials_and_nothing_registered(own_data, tmp_path):
    from istar_tune.tasks import get_task, task_of

    files = own_data("sst2", "csv", string_labels=True)
    task = task_of({"name": "reviews", "train": str(files["train"]), "validation": str(files["validation"])})
    assert not task.resolved
    tasks, problems = preflight.resolve_data([task, "rte"], None, definitions_only=True)
    assert problems == [] and tasks[1] is get_task("rte")  # the shipped one not read
    resolved = tasks[0]
    assert resolved.resolved and resolved.label_names == ("negative", "positive")
    assert resolved.checksums["train"].startswith("sha256:")
    with pytest.raises(ConfigError, match="unknown task 'reviews'"):
        get_task("reviews")  # what planning reads is what the preflight returned, not a registry it filled


def test_every_data_problem_of_every_task_at_once(own_data, glue_tiny, tmp_path):
    from istar_tune.tasks import task_of

    files = own_data("sst2", "csv")
    a = task_of({"name": "a", "train": str(files["train"]), "validation": str(files["validation"]),
                 "text_fields": ["text"], "label_field": "y"})
    renamed = {}
    for split, path in files.items():  # the texts in a field named as the scores
        renamed[split] = tmp_path / f"b-{path.name}"
        renamed[split].write_text(path.read_text().replace("text,label", "body,rating", 1))
    b = task_of({"name": "b", "train": str(renamed["train"]), "validation": str(renamed["validation"]),
                 "problem_type": "regression", "text_fields": ["rating"], "label_field": "body"})
    (tmp_path / "RTE").mkdir()
    problems = preflight.check_data([a, b, "rte"], str(tmp_path))
    # a: field y missing in both splits; b: its "text" field holds the scores, in both; RTE: no files
    assert len(problems) == 5
    assert sum("no field 'y'" in p for p in problems) == 2
    assert sum("text field 'rating' holds numbers only (" in p and "), not text: an id or a score" in p
               for p in problems) == 2
    assert "RTE files not found" in problems[4]


def test_a_hub_task_while_the_hub_does_not_answer_is_refused_at_once(monkeypatch):
    import time

    from istar_tune.tasks import task_of

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    boolq = task_of({"name": "boolq", "hub": {"path": "google/boolq"}, "text_fields": ["question", "passage"],
                     "label_field": "answer"}, source="boolq.yaml")
    began = time.monotonic()
    problems = preflight.check_data([boolq], None)
    assert time.monotonic() - began < 5
    assert problems == ["boolq.yaml: task boolq reads the hub data set google/boolq, and the Hugging Face hub does "
                        "not answer within 5 s (or HF_HUB_OFFLINE is set): give its train and validation files "
                        "instead, or run where the hub answers"]


GIB = 2**30


def _gpu_node(kind: str | None = "H100", gpus: float = 8, alive: bool = True) -> dict:
    resources = {"CPU": 64.0, "GPU": gpus, **({f"accelerator_type:{kind}": 1.0} if kind else {})}
    return {"Alive": alive, "Resources": resources}


def test_the_gpus_memory_comes_from_the_smallest_known_accelerator_type_of_alive_gpu_nodes():
    assert preflight.cluster_gpu_memory([_gpu_node("H100"), _gpu_node("T4"), _gpu_node("V100", alive=False)]) == (
        16.0, "the T4's 16 GiB")
    assert preflight.cluster_gpu_memory([_gpu_node(None), {"Resources": {"CPU": 4.0}}]) is None


def test_a_packing_whose_trials_do_not_fit_is_one_line_naming_the_largest_that_does():
    needs = [("small", 2 * GIB), ("bert × rte × istar at batch 32 × 128 tokens", 10 * GIB)]
    [problem] = preflight.check_packing(needs, 0.125, 40.0, "the A100's 40 GiB")
    assert problem.startswith("resources.gpu 0.125 packs 8 trials to a GPU, but a trial of bert × rte × istar")
    assert "the largest packing that fits is 3 (resources.gpu: 0.333)" in problem  # 36 GiB of 40 usable
    assert preflight.check_packing(needs, 0.333, 40.0, "the A100's 40 GiB") == []
    assert preflight.check_packing(needs, 1.0, 40.0, "x") == [] and preflight.check_packing(needs, 0, 1.0, "x") == []
    [alone] = preflight.check_packing(needs, 1.0, 8.0, "--gpu-memory-gb 8")
    assert "needs about 10.0 GiB of GPU memory (estimate), more than 90% of --gpu-memory-gb 8" in alone


def test_the_cluster_check_estimates_memory_only_when_the_gpus_size_is_known():
    asked = []

    def needs():
        asked.append(1)
        return [("big", 30 * GIB)]

    assert preflight.check_cluster(1, 0.5, [_gpu_node(None)], needs) == [] and not asked
    assert "largest packing that fits is 1" in preflight.check_cluster(1, 0.5, [_gpu_node("A100")], needs)[0]
    assert preflight.check_cluster(1, 0.5, [_gpu_node(None)], needs, gpu_memory_gb=80) == []


def test_trial_needs_are_one_per_model_task_method_at_the_largest_batch_size(tmp_path):
    from istar_tune.config import RunSettings
    from istar_tune.search.plan import plan
    from istar_tune.search.spaces.file import load_search_space

    text = ("name: s\nmodels: [tiny-bert]\ntasks: [rte]\nmethods: [base, istar]\nhyperparameters:\n"
            "  batch_size: {grid: [8, 32]}\n")
    (tmp_path / "s.yaml").write_text(text)
    needs = preflight.trial_needs(plan(load_search_space(tmp_path / "s.yaml")), RunSettings(max_length=64))
    assert [what for what, _ in needs] == ["tiny-bert × rte × base at batch 32 × 64 tokens",
                                           "tiny-bert × rte × istar at batch 32 × 64 tokens"]
    assert needs[1][1] > needs[0][1] > 0  # I-STAR's point cloud on top


def test_held_out_data_with_extractive_qa_is_refused_before_any_trial():
    from istar_tune.config import RunSettings
    from istar_tune.tasks import Task

    qa, words = Task("answers", "A", "extractive_qa", "f1"), Task("words", "W", "classification", "accuracy")
    [problem] = preflight.holdout_problems([words, qa], RunSettings(holdout=0.25), "space.yaml")
    assert problem == ("space.yaml: settings.holdout 0.25 applies to sentence-level tasks, and answers is extractive "
                       "QA (its training windows are not examples): search it in a space without holdout")
    assert preflight.holdout_problems([qa], RunSettings(), "space.yaml") == []
