"""The dry run's report: GPU-hours from a measured throughput (at the space's packing and the recommended one),
one trial's memory per group, and the packing check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.search.dry_run import group_cost
from istar_tune.search.plan import plan, planned_configs
from istar_tune.search.spaces.cost import Throughput, trial_seconds
from istar_tune.search.spaces.file import load_search_space

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def test_gpu_hours_come_from_the_measured_throughput_with_and_without_sharing(capsys):
    space = load_search_space(SPACES / "paper_base.yaml").narrow(["bert"], ["rte"])
    [group] = plan(space)
    slow, fast = Throughput({"bert": 10_000}, 256), Throughput({"bert": 20_000}, 256)
    cost_slow, cost_fast = group_cost(space, group, slow), group_cost(space, group, fast)
    assert cost_slow.gpu_hours > cost_fast.gpu_hours > 0
    assert cost_slow.unshared_gpu_hours > 2 * cost_slow.gpu_hours
    seconds = sum(trial_seconds(t, 250_000, slow) for t in planned_configs(space, group))
    assert cost_slow.gpu_hours == pytest.approx(seconds / 3600)
    assert main(["search", str(SPACES / "paper_base.yaml"), "--models", "bert", "--tasks", "rte", "--dry-run",
                 "--tokens-per-second", "bert=10000"]) == 0
    assert (f"{cost_slow.gpu_hours:.1f} GPU-hours ({cost_slow.unshared_gpu_hours:.1f} without sharing) at the space's "
            "packing (1 trial a GPU: bert 10,000 tokens/s per trial)" in capsys.readouterr().out)


@pytest.mark.parametrize("value", ["bert", "bert=fast", "bert=-3", "=5"])
def test_a_bad_throughput_is_one_clear_error(value):
    with pytest.raises(ConfigError, match="MODEL=TOKENS_PER_SECOND"):
        Throughput.parse([value], ("bert",), 128)


def _calibration(path: Path, model: str = "bert", max_length: int = 128) -> Path:
    """A throughput file as calibrate writes it: 4 trials a GPU give twice the total of one."""
    rows = [{"packing": k, "mode": "eager", "tokens_per_second_per_trial": rate, "tokens_per_second_total": rate * k,
             "peak_memory_gb": 3.0} for k, rate in ((1, 10_000.0), (2, 8_000.0), (4, 5_000.0))]
    rows.append({"packing": 8, "mode": "eager", "error": "out of memory"})
    path.write_text(yaml.safe_dump({"model": model, "task": "rte", "method": "istar", "batch_size": 32,
                                    "max_length": max_length, "device": "cuda", "measurements": rows,
                                    "recommended": {"packing": 4, "mode": "eager"}}))
    return path


def test_a_calibration_file_gives_gpu_hours_at_the_spaces_packing_and_the_recommended_one(tmp_path, capsys):
    calibration = _calibration(tmp_path / "bert.yaml")
    space = load_search_space(SPACES / "paper_base.yaml").narrow(["bert"], ["rte"])
    [group] = plan(space)
    rates = Throughput.read([str(calibration)], space.models, 128, packing=1)
    cost = group_cost(space, group, rates)
    # At 4 a GPU each trial runs at half the speed of one alone and holds a quarter GPU: half the GPU-hours of the
    # training, a quarter of the start-up's.
    packed = sum(trial_seconds(t, 250_000, rates.at(4)) for t in planned_configs(space, group)) / 4 / 3600
    assert cost.recommended_gpu_hours == pytest.approx(packed) and cost.gpu_hours / 2.5 < packed < cost.gpu_hours / 2
    assert rates.at(4).tokens_per_second == {"bert": 5_000.0}
    assert rates.rate("bert", 3) == pytest.approx(8_000.0 * 2 / 3)  # the total of 2 shared by 3: no gain assumed
    assert main(["search", str(SPACES / "paper_base.yaml"), "--models", "bert", "--tasks", "rte", "--dry-run",
                 "--throughput", str(calibration)]) == 0
    out = capsys.readouterr().out
    assert (f"{cost.gpu_hours:.1f} GPU-hours" in out and f"{cost.recommended_gpu_hours:.1f} GPU-hours at the "
            "recommended packing (bert 4 a GPU (resources.gpu 0.25))" in out)
    # Measured at 256 tokens: the same examples per second are twice the tokens at the space's 128.
    assert Throughput.read([str(_calibration(tmp_path / "long.yaml", max_length=256))], ("bert",), 128).rate(
        "bert", 1) == pytest.approx(5_000.0)


@pytest.mark.parametrize(("text", "message"), [("model: bert\n", "not a file written by `istar-tune calibrate`"),
                                               ("[1, 2]\n", "expected a mapping")])
def test_a_file_that_is_not_a_calibration_is_one_line(tmp_path, text, message, capsys):
    (tmp_path / "t.yaml").write_text(text)
    assert main(["search", str(SPACES / "paper_base.yaml"), "--models", "bert", "--tasks", "rte", "--dry-run",
                 "--throughput", str(tmp_path / "t.yaml")]) == 2
    assert message in capsys.readouterr().err


def test_the_dry_run_shows_each_groups_memory_and_checks_a_packing_against_the_gpu(tmp_path, capsys):
    text = (SPACES / "smoke.yaml").read_text().replace("gpu: 0}", "gpu: 0.125}")
    (tmp_path / "packed.yaml").write_text(text)
    assert main(["search", str(tmp_path / "packed.yaml"), "--dry-run", "--gpu-memory-gb", "0.75"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("model "))
    assert "GiB/trial" in header
    row = next(line for line in out.splitlines() if line.startswith("tiny-bert "))
    assert 0.5 < float(row.split()[-1]) < 0.6  # the CUDA context and a tiny model
    assert ("packing: 8 trials a GPU asked; memory holds 1: the memory bind, so 1 run a GPU (resources.gpu 0.125, "
            "0.75 GiB GPUs); resources.gpu 0.125 packs 8 trials to a GPU" in out)
    assert "the largest packing that fits is 1 (resources.gpu: 1)" in out
    assert main(["search", str(tmp_path / "packed.yaml"), "--dry-run", "--gpu-memory-gb", "80", "--cores-per-gpu",
                 "2"]) == 0
    assert re.search(r"packing: 8 trials a GPU asked; memory holds \d{3}, cores hold 2 \(2 cores per GPU at "
                     r"resources.cpu 1\): the cores bind, so 2 run a GPU \(a trial's step is host-bound: each needs "
                     r"a core of its own\) \(resources.gpu 0.125, 80 GiB GPUs\)", capsys.readouterr().out)
    assert main(["search", "paper_base", "--models", "bert", "--tasks", "rte", "--dry-run"]) == 0
    out = capsys.readouterr().out  # bert's config is not on this machine and the hub is offline: said, not retried
    assert "GiB/trial" in out and "the models' configs are not on this machine" in out


def test_the_dry_run_is_a_library_function(glue_tiny):
    from istar_tune import dry_run, load_search_space

    root = Path(__file__).resolve().parents[2]
    space = load_search_space(root / "search_spaces" / "smoke.yaml")
    report = dry_run([space], data_dir=str(glue_tiny))[0]
    assert "total 8 configurations in 8 trials, 4 groups" in report and "tiny-bert  rte" in report
