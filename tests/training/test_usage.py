"""An epoch's GPU figures: peak memory and mean utilisation on CUDA (torch's counters, faked here: no GPU on CI),
nothing on CPU."""

from __future__ import annotations

import itertools
import time

import torch

from istar_tune.training.usage import PEAK_MEMORY, UTILIZATION, DeviceUsage


def test_on_cpu_an_epoch_reports_no_gpu_figures():
    with DeviceUsage(torch.device("cpu")) as usage:
        pass
    assert usage.record() == {}


def _fake_cuda(monkeypatch, utilization):
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", resets.append)
    monkeypatch.setattr(torch.cuda, "utilization", utilization)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 3 * 2**30)
    return resets


def test_on_cuda_the_epochs_peak_memory_and_mean_utilisation_are_reported(monkeypatch):
    readings = itertools.cycle([40, 80])
    resets = _fake_cuda(monkeypatch, lambda device: next(readings))
    with DeviceUsage(torch.device("cuda", 0), interval_s=0.01) as usage:
        time.sleep(0.2)
    figures = usage.record()
    assert resets == [torch.device("cuda", 0)]  # the peak is the epoch's own
    assert figures[PEAK_MEMORY] == 3.0
    assert 40 <= figures[UTILIZATION] <= 80 and len(usage._samples) > 5
    count = len(usage._samples)
    time.sleep(0.05)
    assert len(usage._samples) == count  # sampling ended with the epoch


def test_without_nvml_only_the_memory_is_reported(monkeypatch):
    def no_nvml(device):
        raise ModuleNotFoundError("pynvml does not seem to be installed")

    _fake_cuda(monkeypatch, no_nvml)
    with DeviceUsage(torch.device("cuda", 0), interval_s=0.01) as usage:
        time.sleep(0.05)
    assert usage.record() == {PEAK_MEMORY: 3.0}


def test_nvml_missing_is_quiet_and_nvml_failing_is_said_once(monkeypatch, caplog):
    import logging

    import torch

    from istar_tune.training import usage

    usage._said.clear()
    reader = usage.DeviceUsage.__new__(usage.DeviceUsage)
    reader.device, reader._samples = torch.device("cuda"), []

    def missing(device):
        raise ModuleNotFoundError("pynvml does not seem to be installed")

    def failing(device):
        raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    monkeypatch.setattr(torch.cuda, "utilization", missing)
    with caplog.at_level(logging.WARNING):
        assert reader._sample() is False
        assert caplog.text == ""
        monkeypatch.setattr(torch.cuda, "utilization", failing)
        assert reader._sample() is False and reader._sample() is False
    assert caplog.text.count("GPU utilisation is not recorded: NVML fails (RuntimeError: NVML_ERROR_DRIVER") == 1
