"""How a training step runs (``settings.step_mode``): one frozen record per mode, chosen once when a run starts, so no
module compares a mode's name. A record says what the settings alone refuse with it, whether a trial needs a GPU
share, how the run prepares the model (the encoder compiled or not) and whether a stage's steps are replayed as CUDA
graphs (``training/graphs.py``: such a stage keeps its gradients allocated and zeroes them in place, and refreshes
Σ_S in place, since the graphs read both where they were captured; autocast runs without its cache)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepMode:
    name: str
    """``settings.step_mode``'s value that chooses it."""
    compiles: bool = False
    """The encoder runs through ``torch.compile`` (mode reduce-overhead on CUDA), compiled in place when the run
    starts (the state dict keeps its keys)."""
    graphs: bool = False
    """A stage's forward, loss and backward are replayed as one CUDA graph per batch shape: a CUDA device, a GPU share
    per trial, length buckets; neither fp16 nor ``star_sigma: training``."""

    @property
    def needs_gpu(self) -> bool:
        """A search's trial needs a GPU share (``resources.gpu``) to run it."""
        return self.graphs

    def setting_problems(self, length_bucket: int, star_sigma: str) -> list[str]:
        """What the run settings alone refuse with this mode (the device and precision are checked when the run
        starts: :func:`istar_tune.training.graphs.graphs_problems`)."""
        if not self.graphs:
            return []
        problems = []
        if length_bucket == 0:
            problems.append(f"step_mode {self.name} needs length_bucket > 0 (a graph per batch shape; without buckets "
                            "every batch length is a shape of its own): e.g. length_bucket 16")
        if star_sigma == "training":
            problems.append(f"step_mode {self.name} does not take star_sigma training (its covariance counts on the "
                            "host every step): use star_sigma pass")
        return problems


STEP_MODES = {mode.name: mode for mode in (StepMode("eager"), StepMode("graphs", graphs=True),
                                           StepMode("compile", compiles=True))}
"""Every step mode by name."""


def get_step_mode(name: str) -> StepMode:
    """The mode ``name`` chooses (a name the settings' validation let through)."""
    return STEP_MODES[name]
