"""istar-tune's benchmarks: one command each, ratios measured in one run (README.md beside this file lists each
command and its figures). A package so that its modules import one another by name (``python -m
benchmarks.device``, ``python -m benchmarks.bench_packing``, run from the repository's root); it is not installed
with ``istar_tune``.

* ``bench_isoscore``: IsoScore*'s closed form against the released SVD formula, forward and backward.
* ``bench_step``: an I-STAR training step against a Base one.
* ``bench_vs_trainer``: istar-tune's training loop against Hugging Face's ``Trainer``.
* ``bench_ray_overhead``: seconds per trial of the search machinery itself (no-op trials).
* ``bench_search_start``: where a small real search's CPU goes (driver, Ray, trial workers, imports, epochs).
* ``bench_paper_scale``: the paper's whole protocol simulated on a multi-node cluster with MLflow over PostgreSQL.
* ``bench_packing``: several trials a GPU against one, on the paper's protocol.
* ``bench_replay``: the replay's time per model × task on the paper's grids.
* ``bench_synetune``: the replay's ASHA against Syne Tune's simulator on an exported grid.
* ``bench_fused``: K configurations trained as one fused bundle against the same K one after another, and against
  ``hfta_bert``: the same bundle through HFTA-style operators fused by hand for BERT.
* ``bench_fused_search``: a grid (or a search space file, the first page's) searched as fused trials against the
  same grid unfused.
* ``bench_coverage``: the coverage of every interval the robust seeds statistics can print, by simulation; writes the
  table the tool reads (``istar_tune/results/coverage.json``).
* ``profile_step``: where a training step's time goes (the device check's ``profile`` section).
* ``device/``: the prepared device check for a lent GPU machine.
"""
