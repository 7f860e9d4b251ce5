"""Results, read from MLflow: ``tables`` (the best configuration per group, the paper's Table 2, and the dispatch of
every kind), ``seeds`` (the paper's Table 1), ``robust`` (a seeds stage against Base paired by seed: bootstrap
intervals, P(X > Y), the IQM over tasks), ``budget`` (expected validation performance: the best of n
configurations), ``groups`` (what every table shares), ``formats`` (Markdown, csv, LaTeX, parquet), ``export`` (best
configurations as ``train --config`` files), ``plots``, ``status`` (a running search, group by group) and
``aggregates`` (a seeds stage's aggregate runs, written back to MLflow with its seeds nested under them)."""
