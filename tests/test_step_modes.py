"""The step modes as records: what each one's name chooses, what the settings alone refuse with it, and that the
training path asks the record, never the name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from istar_tune.config import RunSettings, from_dict
from istar_tune.errors import ConfigError
from istar_tune.step_modes import STEP_MODES, get_step_mode
from istar_tune.training import graphs
from istar_tune.training.graphs import EagerSteps, GraphedStep, stage_steps

PACKAGE = Path(__file__).resolve().parents[1] / "istar_tune"


def test_each_mode_is_a_record_of_what_it_does():
    assert sorted(STEP_MODES) == ["compile", "eager", "graphs"]
    eager, graphs, compiled = (get_step_mode(n) for n in ("eager", "graphs", "compile"))
    assert (eager.compiles, eager.graphs, eager.needs_gpu) == (False, False, False)
    assert (graphs.compiles, graphs.graphs, graphs.needs_gpu) == (False, True, True)
    assert (compiled.compiles, compiled.graphs, compiled.needs_gpu) == (True, False, False)
    assert graphs.setting_problems(0, "training") == [
        "step_mode graphs needs length_bucket > 0 (a graph per batch shape; without buckets every batch length is a "
        "shape of its own): e.g. length_bucket 16",
        "step_mode graphs does not take star_sigma training (its covariance counts on the host every step): use "
        "star_sigma pass"]
    assert eager.setting_problems(0, "training") == compiled.setting_problems(0, "training") == []
    with pytest.raises(ConfigError, match="step_mode must be one of eager, graphs, compile, got 'fast'"):
        from_dict(RunSettings, {"step_mode": "fast"})


def test_a_stage_steps_as_its_mode_says_gradients_and_sigma_included(monkeypatch):
    monkeypatch.setattr(graphs, "CudaGraphs", lambda device: None)  # a CPU here: no capture is made
    device = torch.device("cpu")
    eager, graphed = stage_steps(get_step_mode("compile"), device), stage_steps(get_step_mode("graphs"), device)
    assert isinstance(eager, EagerSteps) and isinstance(graphed, GraphedStep)
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    weight.grad = torch.ones(2)
    graphed.zero_grad(optimizer)  # kept allocated, zeroed in place: the graphs write there
    assert weight.grad is not None and not weight.grad.any()
    eager.zero_grad(optimizer)
    assert weight.grad is None
    sigma, new = torch.eye(2), 2 * torch.eye(2)
    own = graphed.own(sigma)
    assert own is not sigma and graphed.refreshed(own, new) is own and torch.equal(own, new)
    assert eager.own(sigma) is sigma and eager.refreshed(sigma, new) is new
    assert eager(lambda batch: batch["x"] * 2, {"x": torch.ones(2)}).tolist() == [2.0, 2.0]


def test_no_module_compares_a_step_modes_name():
    compared = [f"{path.relative_to(PACKAGE)}: {line.strip()}" for path in PACKAGE.rglob("*.py")
                for line in path.read_text(encoding="utf-8").splitlines()
                if re.search(r"step_mode\S*\s*[!=]=|[!=]=\s*\"(graphs|compile|eager)\"", line)]
    assert compared == []
