"""calibrate on this machine's CPU with tiny-bert (k = 1, 2): real co-located training steps, a throughput file the
dry run reads; fused bundles (``--fuse``) measured the same way and read by a fused search's dry run; and the
recommendation rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from istar_tune.apps.calibrate import bundle_advice, recommend
from istar_tune.cli import main

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


@pytest.mark.slow
def test_calibrate_on_cpu_measures_each_packing_and_the_dry_run_reads_its_file(glue_tiny, tmp_path, capsys):
    output = tmp_path / "tiny-bert.yaml"
    assert main(["calibrate", "--model", "tiny-bert", "--task", "rte", "--data-dir", str(glue_tiny), "--packing",
                 "1,2", "--steps", "6", "--warmup", "1", "--batch-size", "8", "--max-length", "48",
                 "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "GPU figures need a GPU" in out and f"wrote {output}" in out and "peak RSS (the whole process" in out
    data = yaml.safe_load(output.read_text())
    assert (data["model"], data["device"], data["max_length"]) == ("tiny-bert", "cpu", 48)
    rows = {row["packing"]: row for row in data["measurements"]}
    assert set(rows) == {1, 2} and all(row["mode"] == "eager" for row in rows.values())
    for k, row in rows.items():
        assert row["tokens_per_second_total"] == pytest.approx(k * row["tokens_per_second_per_trial"], rel=1e-3)
        assert row["tokens_per_second_total"] > 0 and 0.1 < row["peak_memory_gb"] < 8  # a process's peak RSS
    assert data["recommended"]["packing"] in (1, 2)
    space = (SPACES / "smoke.yaml").read_text().replace("gpu: 0}", "gpu: 0.5}")
    (tmp_path / "packed.yaml").write_text(space)
    assert main(["search", str(tmp_path / "packed.yaml"), "--dry-run", "--throughput", str(output)]) == 0
    total = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("total "))
    assert "at the space's packing (2 trials a GPU" in total and "at the recommended packing" in total


def test_the_packing_with_the_most_in_total_is_recommended_the_smallest_within_five_percent():
    rows = [{"packing": 1, "mode": "eager", "tokens_per_second_total": 100.0},
            {"packing": 2, "mode": "eager", "tokens_per_second_total": 190.0},
            {"packing": 4, "mode": "eager", "tokens_per_second_total": 196.0},
            {"packing": 8, "mode": "eager", "error": "out of memory"}]
    assert recommend(rows) == {"packing": 2, "mode": "eager", "resources_gpu": 0.5, "gain_over_one": 1.9}
    rows.append({"packing": 4, "mode": "compiled", "tokens_per_second_total": 300.0})
    assert recommend(rows)["packing"] == 4 and recommend(rows)["mode"] == "compiled"
    assert recommend([{"packing": 1, "mode": "eager", "error": "x"}]) is None
    six = recommend([{"packing": 1, "mode": "eager", "tokens_per_second_total": 100.0},
                     {"packing": 6, "mode": "eager", "tokens_per_second_total": 250.0}])
    assert six["resources_gpu"] == 0.166  # six trials of 0.166 fit one GPU; six of 0.167 would not




def test_the_packing_on_a_node_counts_its_cores_per_gpu():
    from istar_tune.apps.calibrate import cores_advice

    assert cores_advice(4, gpus=8, cores=16) == ("4 trials a GPU asked; cores hold 2 (2 cores per GPU at resources.cpu "
                                                 "1): the cores bind, so 2 run a GPU (a trial's step is host-bound: "
                                                 "each needs a core of its own)")
    assert cores_advice(4, gpus=8, cores=128).endswith("cores hold 16 (16 cores per GPU at resources.cpu 1): all 4 fit")


@pytest.mark.slow
def test_calibrate_measures_fused_bundles_and_a_fused_dry_run_counts_their_rate(glue_tiny, tmp_path, capsys):
    output = tmp_path / "tiny-bert.yaml"
    assert main(["calibrate", "--model", "tiny-bert", "--task", "rte", "--data-dir", str(glue_tiny), "--packing",
                 "1", "--fuse", "1,2", "--steps", "4", "--warmup", "1", "--batch-size", "8", "--max-length", "48",
                 "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "eager attention" in out and "fused: a bundle of 2 members fits (" in out
    data = yaml.safe_load(output.read_text())
    assert data["attn_implementation"] == "eager"  # the unfused row too: only the fusing differs
    rows = {row["fuse"]: row for row in data["measurements"]}
    assert set(rows) == {1, 2} and all(row["packing"] == 1 and row["tokens_per_second_total"] > 0
                                       for row in rows.values())
    assert rows[2]["peak_memory_gb"] > 0.1
    space = tmp_path / "fused.yaml"
    space.write_text(yaml.safe_dump({
        "name": "fused", "models": ["tiny-bert"], "tasks": ["rte"], "methods": ["base"],
        "hyperparameters": {"epochs": 1, "learning_rate": {"grid": [1e-3, 2e-3, 3e-3, 4e-3]}},
        "search": {"algorithm": "grid", "fuse": 2}, "settings": {"attn_implementation": "eager"}}))
    assert main(["search", str(space), "--dry-run", "--throughput", str(output)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("fused tiny-bert/rte/base: 4 configurations in 2 trials of 2, 2 members")
               and "GPU-hours at the bundles' calibrated rates" in line for line in lines), lines


def test_a_bundle_is_recommended_where_it_gives_the_most_and_the_fewest_at_once_win_a_tie():
    rows = [{"packing": 1, "fuse": 1, "mode": "eager", "tokens_per_second_total": 100.0},
            {"packing": 4, "fuse": 1, "mode": "eager", "tokens_per_second_total": 180.0},
            {"packing": 1, "fuse": 4, "mode": "eager", "tokens_per_second_total": 185.0},
            {"packing": 1, "fuse": 8, "mode": "eager", "tokens_per_second_total": 300.0},
            {"packing": 2, "fuse": 4, "mode": "eager", "tokens_per_second_total": 305.0}]
    assert recommend(rows) == {"packing": 1, "mode": "eager", "resources_gpu": 1.0, "fuse": 8, "gain_over_one": 3.0}
    assert recommend(rows[:3])["packing"] == 1 and recommend(rows[:3])["fuse"] == 4  # 4 at once either way: 1 process
    assert "fuse" not in recommend(rows[:2])


def test_the_largest_bundle_that_fit_and_how_many_a_gpu_holds_by_memory_and_cores():
    rows = [{"packing": 1, "fuse": 4, "mode": "eager", "peak_memory_gb": 10.0},
            {"packing": 1, "fuse": 8, "mode": "eager", "peak_memory_gb": 19.5},
            {"packing": 1, "fuse": 16, "mode": "eager", "error": "out of memory"}]
    said = bundle_advice(rows, gpu_bytes=80 * 2**30, cores_per_gpu=16)
    assert said == ("fused: a bundle of 8 members fits (19.50 GiB peak), of 16 not (out of memory); a GPU holds such "
                    "bundles by cores 16, by memory 4 (16 cores per GPU, one a bundle): 4 a GPU, the memory bind")
    assert bundle_advice(rows, None, 2) == ("fused: a bundle of 8 members fits (19.50 GiB peak), of 16 not "
                                            "(out of memory)")
    assert bundle_advice(rows[2:], 80 * 2**30, 16) == ""
