"""What an epoch asked of the accelerator, read in the trial and reported with the epoch (only the driver writes to
MLflow): its peak GPU memory (PyTorch's allocator) and mean GPU utilisation (NVML through ``torch.cuda.utilization``,
sampled every ``interval_s``; left out where NVML is not installed). Nothing on CPU.
"""

from __future__ import annotations

import logging
import threading

import torch

from istar_tune.training.memory import GIB

PEAK_MEMORY = "gpu_peak_memory_gb"
UTILIZATION = "gpu_utilization"
log = logging.getLogger(__name__)
_said: list = []
"""The NVML failure said already (once a process)."""


class DeviceUsage:
    """``with DeviceUsage(device) as usage: <epoch>``, then ``usage.record()``."""

    def __init__(self, device: torch.device, interval_s: float = 1.0):
        self.device, self.interval_s = device, interval_s
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DeviceUsage:
        if self.device.type != "cuda":
            return self
        torch.cuda.reset_peak_memory_stats(self.device)
        if self._sample():  # NVML answers: keep sampling while the epoch runs
            self._thread = threading.Thread(target=self._run, name="istar-tune-gpu-usage", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample(self) -> bool:
        try:
            self._samples.append(float(torch.cuda.utilization(self.device)))
        except ModuleNotFoundError:  # no NVML (pynvml / nvidia-ml-py) here: no utilisation figure
            return False
        except Exception as err:  # noqa: BLE001 - NVML installed but failing: said once, with its own error
            if not _said:
                _said.append(err)
                log.warning("GPU utilisation is not recorded: NVML fails (%s: %s)", type(err).__name__, err)
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def record(self) -> dict[str, float]:
        """The epoch's figures (none on CPU): peak memory in GiB and, where NVML answered, mean utilisation in %."""
        if self.device.type != "cuda":
            return {}
        figures = {PEAK_MEMORY: torch.cuda.max_memory_allocated(self.device) / GIB}
        if self._samples:
            figures[UTILIZATION] = sum(self._samples) / len(self._samples)
        return figures
