from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from istar_tune.errors import ConfigError
from istar_tune.search.tune.simulate import OPTIMUM_CANDIDATES, Simulation, epoch_metrics, expected_score, optimum


def _grid(model, task, method):
    keys = ["learning_rate", "batch_size", "epochs"] + (["lam", "zeta"] if method == "istar" else [])
    fixed = {"lam": 1.0} if method == "cosreg" else {}  # as paper_cosreg.yaml
    for values in itertools.product(*(OPTIMUM_CANDIDATES[k] for k in keys)):
        yield {"model": model, "task": task, "method": method, **fixed, **dict(zip(keys, values))}


@pytest.mark.parametrize("model,task,method", [("bert", "rte", "istar"), ("albert", "squad", "base"),
                                                ("distilbert", "cola", "cosreg")])
def test_the_noisy_best_of_the_paper_grid_is_the_known_optimum(model, task, method):
    simulation = Simulation(noise=0.002, seed=3)
    configs = list(_grid(model, task, method))
    metric = "f1" if task == "squad" else ("mcc" if task == "cola" else "accuracy")

    def final(config):
        return epoch_metrics(config, config["epochs"], simulation)[metric]

    best = max(configs, key=final)
    want = optimum(model, task, method, seed=3)
    assert {k: best[k] for k in want} == want
    runner_up = sorted(expected_score(c, 3) for c in configs)[-2]
    assert expected_score(best, 3) - runner_up >= 0.0065  # the smallest step beats twice the noise


def test_metrics_are_deterministic_and_seeds_vary_them_within_the_noise():
    config = {"model": "bert", "task": "sst2", "method": "base", "learning_rate": 3e-5, "batch_size": 16,
              "epochs": 3}
    simulation = Simulation(noise=0.002)
    first = epoch_metrics(config, 3, simulation)
    assert epoch_metrics(dict(config), 3, simulation) == first
    seeded = [epoch_metrics({**config, "seed": s}, 3, simulation)["accuracy"] for s in range(1, 6)]
    assert len(set(seeded)) == 5
    assert all(abs(v - expected_score(config)) <= 0.002 for v in seeded)
    # earlier epochs score lower: the curve rises to the final value
    assert epoch_metrics(config, 1, simulation)["accuracy"] < first["accuracy"]


def test_simulation_settings_are_validated():
    with pytest.raises(ConfigError, match="time-factor"):
        Simulation(time_factor=-1)
    with pytest.raises(ConfigError, match=r"time-factor must lie in \[0, 1\]"):
        Simulation(time_factor=1e9)  # a trial would wait longer than its real run: refused before anything starts
    with pytest.raises(ConfigError, match="noise"):
        Simulation(noise=0.01)


def test_the_simulator_module_does_not_import_torch():
    code = ("import sys, istar_tune.search.tune.simulate, istar_tune.search.run; "
            "print('torch' in sys.modules, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
