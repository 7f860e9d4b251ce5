"""Results, read from MLflow: ``tables`` (the best configuration per group, the paper's Table 2, and the dispatch of
every kind), ``seeds`` (the paper's Table 1), ``robust`` (a seeds stage against Base paired by seed: the paired
t-interval and tests, the effect in seed SDs, what the seeds can detect), ``paired`` (its statistics, arrays in),
``resampling`` (bootstrap intervals, enumerated exactly where small), ``coverage`` (what each resampling interval
covers at n pairs, measured by benchmarks/bench_coverage.py), ``budget`` (expected validation performance: the best of n
configurations), ``groups`` (what every table shares), ``formats`` (Markdown, csv, LaTeX, parquet), ``export`` (best
configurations as ``train --config`` files), ``plots``, ``status`` (a running search, group by group) and
``aggregates`` (a seeds stage's aggregate runs, written back to MLflow with its seeds nested under them)."""
