"""Ratio of an I-STAR training step to a Base training step: same model, batch and sequence length.

    python benchmarks/bench_step.py [--model minilm] [--batch-size 32] [--seq-len 64] [--steps 10]

A step is forward, loss, backward and an AdamW update; the I-STAR step adds the all-layer IsoScore* penalty
against a fixed Σ_S (the per-epoch Σ_S refresh is excluded). Base and I-STAR steps are interleaved in one run so
that machine noise hits both alike; the medians are printed. On CUDA the steps also run under autocast (bf16
where supported, else fp16), with the penalty in float32.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from istar_tune.losses import penalty
from istar_tune.models import hidden_size, load_model
from istar_tune.tasks import get_task


def train_step(model, optimizer, batch, method: str, shrinkage_cov, amp_dtype, device) -> None:
    with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
        outputs = model(**batch, output_hidden_states=method == "istar")
    loss = outputs.loss.float()
    extra = penalty(method, outputs.hidden_states, batch["attention_mask"], lam=-1.0, zeta=0.2,
                    shrinkage_cov=shrinkage_cov) if method == "istar" else None
    if extra is not None:
        loss = loss + extra
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(model_name: str, batch_size: int, seq_len: int, steps: int, device: torch.device) -> tuple[float, float]:
    torch.manual_seed(0)
    model = load_model(model_name, get_task("sst2")).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    vocab = model.config.vocab_size
    mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    mask[batch_size // 2:, seq_len * 3 // 4:] = 0  # some padding, as in real batches
    batch = {"input_ids": torch.randint(1000, vocab, (batch_size, seq_len)), "attention_mask": mask,
             "labels": torch.randint(0, 2, (batch_size,))}
    batch = {k: v.to(device) for k, v in batch.items()}
    d = hidden_size(model)
    shrinkage_cov = torch.eye(d, device=device)
    amp_dtype = None
    if device.type == "cuda":
        amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16

    def timed(method: str) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        train_step(model, optimizer, batch, method, shrinkage_cov, amp_dtype, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for method in ("base", "istar"):  # warm-up
        timed(method)
        timed(method)
    base, istar = [], []
    for _ in range(steps):
        base.append(timed("base"))
        istar.append(timed("istar"))
    return statistics.median(base), statistics.median(istar)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, model {args.model}, batch {args.batch_size} x {args.seq_len} tokens, "
          f"{args.steps} interleaved steps each")
    print(f"{'device':>6} {'base step (s)':>14} {'I-STAR step (s)':>16} {'ratio':>7}")
    for device in devices:
        base, istar = measure(args.model, args.batch_size, args.seq_len, args.steps, device)
        label = device.type + (" amp" if device.type == "cuda" else "")
        print(f"{label:>6} {base:>14.4f} {istar:>16.4f} {istar / base:>7.3f}")


if __name__ == "__main__":
    main()
