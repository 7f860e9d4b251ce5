"""The memory estimate: its arithmetic parts equal the real model's, its activations what torch.profiler records."""

from __future__ import annotations

import pytest
import torch

from istar_tune.losses import penalty
from istar_tune.models import load_model, meta_model
from istar_tune.tasks import get_task
from istar_tune.training.memory import (
    CUDA_CONTEXT_BYTES,
    MemoryEstimate,
    estimate_memory,
    largest_packing,
    parameter_bytes,
)

RTE = get_task("rte")


@pytest.fixture(scope="module")
def bert_base_folder(tmp_path_factory):
    """BERT-base's config (transformers' BertConfig defaults are bert-base's sizes) as a local model folder."""
    from transformers import BertConfig

    folder = tmp_path_factory.mktemp("bert-base")
    BertConfig(num_labels=2).save_pretrained(folder)
    return folder


def _real(name: str, folder):
    if folder is None:
        return load_model(name, RTE)
    from transformers import AutoConfig, AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(folder, num_labels=2))


@pytest.mark.parametrize("name", ["tiny-bert", "minilm", "bert-base"])
def test_weights_gradients_and_adamw_state_equal_the_real_models(name, bert_base_folder):
    folder = bert_base_folder if name == "bert-base" else None
    meta = meta_model(str(folder) if folder else name, RTE)
    assert next(meta.parameters()).device.type == "meta"
    real = _real(name, folder)
    weights, gradients, optimizer = parameter_bytes(meta)
    assert weights == sum(p.numel() * 4 for p in real.parameters())
    assert weights > {"tiny-bert": 1e6, "minilm": 80e6, "bert-base": 400e6}[name]  # its own size, not another's
    # One real AdamW step (as the trials build it: fused) and one backward: what they allocate.
    optimizer_real = torch.optim.AdamW(real.parameters(), lr=1e-5, fused=True)
    batch = {"input_ids": torch.randint(1000, 2000, (2, 8)), "labels": torch.tensor([0, 1])}
    real(**batch).loss.backward()
    assert gradients == sum(p.grad.numel() * p.grad.element_size() for p in real.parameters() if p.grad is not None)
    optimizer_real.step()
    state = [t for s in optimizer_real.state.values() for t in s.values() if torch.is_tensor(t)]
    assert optimizer == sum(t.numel() * t.element_size() for t in state)


def _profiled_bytes(step) -> int:
    """What torch.profiler records as allocated and still held at the end of ``step`` (a forward pass with grad)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        kept = step()
    assert kept is not None
    return sum(event.self_cpu_memory_usage for event in prof.events())


@pytest.mark.parametrize("name", ["tiny-bert", "minilm"])
@pytest.mark.parametrize("method", ["base", "istar"])
@pytest.mark.parametrize(("batch", "length"), [(8, 128), (32, 48)])
def test_activations_are_within_30_percent_of_what_the_profiler_records_on_cpu(name, method, batch, length):
    model = load_model(name, RTE).train()
    ids = torch.randint(1000, 2000, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    cov = torch.eye(model.config.hidden_size)

    def step():
        out = model(input_ids=ids, attention_mask=mask, labels=torch.zeros(batch, dtype=torch.long),
                    output_hidden_states=True)
        return out, penalty(method, out.hidden_states, mask, lam=1.0, zeta=0.2, shrinkage_cov=cov)

    measured = _profiled_bytes(step)
    estimate = estimate_memory(meta_model(name, RTE), method, batch, length, eval_batch_size=64, cuda=False)
    assert 0.7 < estimate.training_step / measured < 1.3, (estimate.training_step, measured)
    if method == "base":
        assert estimate.point_cloud == 0


def test_the_peak_adds_the_parts_and_precision_and_cuda_change_what_they_should():
    meta = meta_model("minilm", RTE)
    cpu = estimate_memory(meta, "istar", 32, 128, 64, cuda=False)
    cuda = estimate_memory(meta, "istar", 32, 128, 64, cuda=True)
    half = estimate_memory(meta, "istar", 32, 128, 64, half_precision=True, cuda=True)
    assert cuda.context == CUDA_CONTEXT_BYTES and cpu.context == 0
    assert cuda.activations < cpu.activations  # no attention scores kept with a fused kernel
    assert half.activations < cuda.activations and half.weights == cuda.weights  # float32 master weights
    assert cpu.peak == cpu.weights + cpu.optimizer + max(cpu.gradients + cpu.training_step, cpu.forward_pass)
    bigger = estimate_memory(meta, "istar", 64, 128, 64, cuda=True)
    assert bigger.activations > 1.9 * cuda.activations
    eager = estimate_memory(meta, "istar", 32, 128, 64, cuda=True, attn_implementation="eager")
    assert eager.activations == cpu.activations and eager.context == cuda.context  # eager keeps the scores on CUDA


def test_the_largest_packing_leaves_headroom_and_can_be_none():
    estimate = MemoryEstimate(weights=2 * 2**30, gradients=0, optimizer=0, activations=0, point_cloud=0,
                              forward_pass=0, context=0)
    assert largest_packing(estimate.peak, 80 * 2**30) == 36  # 72 GiB usable of 80
    assert largest_packing(estimate.peak, 2 * 2**30) == 0


def test_a_trial_below_a_whole_gpu_caps_its_allocator_at_its_share(monkeypatch):
    from istar_tune.training.memory import cap_gpu_memory

    capped = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda share: capped.append(share))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cap_gpu_memory(0.25) and capped == [0.25]
    assert not cap_gpu_memory(1.0) and not cap_gpu_memory(None) and capped == [0.25]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not cap_gpu_memory(0.5) and capped == [0.25]


def test_out_of_memory_fails_the_trial_with_what_ran_out_and_what_to_change():
    from istar_tune.errors import TrainingError
    from istar_tune.training.memory import out_of_memory_explained

    with pytest.raises(TrainingError) as caught:
        with out_of_memory_explained("minilm × rte × istar at batch 32 × 128 tokens", 0.25):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
    text = str(caught.value)
    assert text.startswith("out of memory training minilm × rte × istar at batch 32 × 128 tokens (its share: 0.25 of")
    assert "lower batch_size or max_length" in text and "(CUDA out of memory. Tried to allocate 2.00 GiB)" in text
    with pytest.raises(ValueError):  # anything else passes through unchanged
        with out_of_memory_explained("x", 0.5):
            raise ValueError("not memory")
