"""``step_mode: graphs``: its refusals, and its bookkeeping rehearsed on a CPU (a backend whose replay reruns the
captured step on its static buffers, as a CUDA graph replays its kernels on theirs). What needs CUDA — a real capture
and its bit-for-bit equality with eager — is the device check's (``python -m benchmarks.device``, determinism)."""

from __future__ import annotations

import json

import pytest
import torch

from istar_tune.cli import main
from istar_tune.config import RunSettings, from_dict
from istar_tune.errors import ConfigError
from istar_tune.training import graphs, run
from istar_tune.training.graphs import GraphedStep, check_graphs, graphs_problems
from istar_tune.training.state import METRICS_FILE


def test_graphs_are_refused_off_cuda_with_fp16_without_buckets_and_with_a_training_pass_sigma():
    cuda = torch.device("cuda")
    assert graphs_problems(cuda, torch.bfloat16) == [] and graphs_problems(cuda, None) == []
    assert "device is cpu: use step_mode eager or compile" in graphs_problems(torch.device("cpu"), None)[0]
    assert "does not take fp16" in graphs_problems(cuda, torch.float16)[0]
    with pytest.raises(ConfigError, match="settings: step_mode graphs replays CUDA graphs"):
        check_graphs(torch.device("cpu"), None)
    with pytest.raises(ConfigError, match="step_mode graphs needs length_bucket > 0"):
        from_dict(RunSettings, {"step_mode": "graphs"})
    with pytest.raises(ConfigError, match="step_mode graphs does not take star_sigma training"):
        from_dict(RunSettings, {"step_mode": "graphs", "length_bucket": 16, "star_sigma": "training"})
    assert from_dict(RunSettings, {"step_mode": "graphs", "length_bucket": 16}).step_mode == "graphs"


def test_train_with_graphs_on_a_cpu_is_refused_in_one_line(glue_tiny, tmp_path, capsys):
    code = main(["train", "--model", "tiny-bert", "--task", "sst2", "--method", "istar", "--data-dir", str(glue_tiny),
                 "--epochs", "1", "--max-length", "32", "--length-bucket", "8", "--step-mode", "graphs",
                 "--output-dir", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "step_mode graphs replays CUDA graphs" in err
    assert not (tmp_path / "out" / METRICS_FILE).exists()


class Rehearsal:
    """A CPU stand-in for :class:`~istar_tune.training.graphs.CudaGraphs`: capture records the step without running
    it; replay reruns it on the static buffers and writes its losses into the tensor capture returned."""

    captures: list[dict[str, tuple]] = []
    replays = 0

    def __init__(self, device):
        self.device = device

    def eager(self, step_fn, inputs):
        return step_fn(inputs)

    def capture(self, step_fn, inputs):
        losses = torch.full((3,), float("nan"), dtype=torch.float64)
        Rehearsal.captures.append({name: tuple(t.shape) for name, t in inputs.items()})

        def replay():
            losses.copy_(step_fn(inputs))
            Rehearsal.replays += 1

        return replay, losses


def test_graphed_steps_replay_static_buffers_and_train_as_eager_does_to_the_bit(glue_tiny, tmp_path, monkeypatch):
    """Two I-STAR epochs (Σ_S refreshed in place between them, so epoch 2's replays read the new one), eager and
    graphed (rehearsed), end with the same losses, metrics and IsoScore*, to the bit."""
    monkeypatch.setattr(graphs, "CudaGraphs", Rehearsal)
    monkeypatch.setattr(run, "check_graphs", lambda *args: None)  # the device is a CPU here: the rehearsal's point
    monkeypatch.setattr(Rehearsal, "captures", [])
    finals = {}
    for mode in ("eager", "graphs"):
        out = tmp_path / mode
        assert main(["train", "--model", "tiny-bert", "--task", "sst2", "--method", "istar", "--data-dir",
                     str(glue_tiny), "--epochs", "2", "--batch-size", "8", "--max-length", "32", "--length-bucket",
                     "16", "--zeta", "0.5", "--step-mode", mode, "--output-dir", str(out), "--no-progress",
                     "--no-save-checkpoint"]) == 0
        finals[mode] = json.loads((out / METRICS_FILE).read_text())
    assert Rehearsal.captures and Rehearsal.replays > len(Rehearsal.captures)
    assert {shape["input_ids"][1] for shape in Rehearsal.captures} <= {16, 32}
    keys = ("train_loss", "task_loss", "penalty", "accuracy", "eval_isoscore_star")
    for eager_epoch, graphed_epoch in zip(finals["eager"]["epochs"], finals["graphs"]["epochs"], strict=True):
        assert {k: graphed_epoch[k] for k in keys} == {k: eager_epoch[k] for k in keys}


def test_a_shape_is_captured_at_its_second_step_after_the_warmup_and_an_all_ones_mask_stays_eager():
    step = GraphedStep(torch.device("cpu"), warmup_steps=2, backend=Rehearsal("cpu"))
    calls = []

    def step_fn(inputs):
        calls.append(inputs["input_ids"].clone())
        return inputs["input_ids"].double().sum().repeat(3)

    def batch(value, length=4, padded=True):
        mask = torch.ones(2, length, dtype=torch.long)
        if padded:
            mask[0, -1] = 0
        return {"input_ids": torch.full((2, length), value), "attention_mask": mask}

    assert step(step_fn, batch(1))[0] == 8  # warm-up 1
    assert step(step_fn, batch(2))[0] == 16  # warm-up 2 (and this shape's second step: still eager)
    assert not step.graphs
    assert step(step_fn, batch(3))[0] == 24  # captured, then replayed
    assert step(step_fn, batch(4))[0] == 32 and step.replays == 2  # the static buffers hold the new batch
    assert step(step_fn, batch(5, length=8))[0] == 80 and len(step.graphs) == 1  # a new shape: eager first
    assert step(step_fn, batch(6, padded=False))[0] == 48 and step.replays == 2  # no padding: eager
    assert step(step_fn, batch(7, length=8))[0] == 112 and len(step.graphs) == 2
