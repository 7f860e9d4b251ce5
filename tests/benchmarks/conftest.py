"""What the benchmark tests share: a module of ``benchmarks/`` imported by its name in that package (which is not
installed: the repository's root goes on the path for the test)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def benchmark_module(monkeypatch):
    """``benchmark_module("device.common")``: ``benchmarks.device.common``, imported."""
    monkeypatch.syspath_prepend(str(ROOT))
    return lambda name: importlib.import_module(f"benchmarks.{name}")
