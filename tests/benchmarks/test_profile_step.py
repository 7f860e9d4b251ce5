"""The profile section's arithmetic: per-step figures from the profiler's averages."""

from __future__ import annotations

from types import SimpleNamespace


def _event(key, count, self_cpu_us, device_us=0):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=self_cpu_us, self_device_time_total=device_us)


def test_per_step_figures_count_host_reads_syncs_and_the_busiest_ops(benchmark_module):
    profile = benchmark_module("profile_step")
    averages = [_event("aten::mm", 40, 8000, 30000), _event("aten::_local_scalar_dense", 20, 100),
                _event("cudaStreamSynchronize", 10, 5000), _event("ProfilerStep#1", 1, 99999)]
    found = profile.summarise(averages, wall_s=0.5, steps=10, cuda=True)
    assert found["host_ms_per_step"] == 50.0 and found["gpu_busy_ms_per_step"] == 3.0
    assert found["gpu_busy_share"] == 0.06 and found["host_reads_per_step"] == 2 and found["cuda_syncs_per_step"] == 1
    assert [o["op"] for o in found["top_host_ops"]] == ["aten::mm", "cudaStreamSynchronize",
                                                         "aten::_local_scalar_dense"]
    assert found["top_host_ops"][0] == {"op": "aten::mm", "self_cpu_ms_per_step": 0.8, "calls_per_step": 4.0}
    on_cpu = profile.summarise(averages, wall_s=0.5, steps=10, cuda=False)
    assert on_cpu["gpu_busy_ms_per_step"] is None and on_cpu["gpu_busy_share"] is None
