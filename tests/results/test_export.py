from __future__ import annotations

import yaml

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.config import split_config
from istar_tune.search.spaces.file import load_search_space


def test_the_best_configurations_become_train_config_files_that_train(log_trial, glue_tiny, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "smoke", str(tmp_path / "artifacts"))
    settings = {"setting.data_dir": str(glue_tiny), "setting.max_length": 32, "setting.checkpoint": "resume",
                "setting.shrinkage_tokens": 500}
    log_trial(client, experiment, "a", "tiny-bert", "rte", "base", {"accuracy": [0.5]}, learning_rate=1e-3,
              **settings)
    log_trial(client, experiment, "b", "tiny-bert", "rte", "base", {"accuracy": [0.6]}, learning_rate=3e-3,
              **settings)
    log_trial(client, experiment, "c", "tiny-bert", "rte", "istar", {"accuracy": [0.55]}, lam=-1.0, zeta=0.4,
              **settings)
    output = tmp_path / "best.yaml"
    assert main(["table", "--tracking-uri", uri, "--experiment", "smoke", "--kind", "best", "--format", "yaml",
                 "--output", str(output)]) == 0
    assert ("2 train --config file(s): best-tiny-bert-rte-base.yaml, best-tiny-bert-rte-istar.yaml" in
            capsys.readouterr().out)
    every = yaml.safe_load(output.read_text())
    assert set(every) == {"tiny-bert/rte/base", "tiny-bert/rte/istar"}
    base = yaml.safe_load((tmp_path / "best-tiny-bert-rte-base.yaml").read_text())
    assert base["learning_rate"] == 3e-3 and base["max_length"] == 32 and base["data_dir"] == str(glue_tiny)
    assert "lam" not in base and "zeta" not in base and "checkpoint" not in base  # Base reads neither; search-only
    assert every["tiny-bert/rte/istar"]["lam"] == -1.0 and every["tiny-bert/rte/istar"]["zeta"] == 0.4
    split_config(base)  # exactly the keys `train --config` reads
    space = tmp_path / "space.yaml"  # and its hyperparameters read back as a space's constants
    hyperparameters = {k: v for k, v in base.items() if k not in ("model", "task", "method", "data_dir",
                                                                   "max_length", "shrinkage_tokens")}
    space.write_text(yaml.safe_dump({"models": ["tiny-bert"], "tasks": ["rte"], "methods": ["base"],
                                     "hyperparameters": hyperparameters}))
    assert load_search_space(space).groups()[0].domains["learning_rate"].values == (3e-3,)
    assert main(["train", "--config", str(tmp_path / "best-tiny-bert-rte-base.yaml"), "--epochs", "1",
                 "--max-train-samples", "32", "--max-eval-samples", "16", "--no-progress"]) == 0
    assert "best epoch 1: accuracy" in capsys.readouterr().out
