"""Fixtures of the results tests: a store with a few scripted trials."""

from __future__ import annotations

import pytest

from istar_tune import tracking


@pytest.fixture
def store(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "s", str(tmp_path / "artifacts"))
    # minilm / sst2: two base trials (the second is better after its last epoch, the first at its best epoch).
    log_trial(client, exp, "b1", "minilm", "sst2", "base", {"accuracy": [0.90, 0.80]}, learning_rate=1e-5)
    log_trial(client, exp, "b2", "minilm", "sst2", "base", {"accuracy": [0.70, 0.85]}, learning_rate=5e-5)
    log_trial(client, exp, "bx", "minilm", "sst2", "base", {"accuracy": [0.99]}, status="failed")  # not counted
    log_trial(client, exp, "i1", "minilm", "sst2", "istar", {"accuracy": [0.86]}, lam=-1.0, zeta=0.2)
    log_trial(client, exp, "i2", "minilm", "sst2", "istar", {"accuracy": [0.84]}, lam=5.0, zeta=0.8)
    # minilm / cola: mcc; one istar trial only.
    log_trial(client, exp, "c1", "minilm", "cola", "istar", {"mcc": [0.41], "accuracy": [0.7]}, lam=-3.0, zeta=0.4)
    return uri, client
