"""Search: from a search-space YAML to one Ray Tune experiment, its trials recorded in MLflow, in three rooms.

``spaces/`` decides what to run (the space, its YAML file, the cost model); ``tune/`` is what runs inside Ray Tune
(the trial, its checkpoints, the per-group searcher and scheduler, the MLflow logger, the rehearsal stand-in); the
modules here drive one experiment: ``plan`` (each group's trials), ``preflight`` (checks before anything starts),
``guard`` (one search per results folder), ``cluster`` (joining Ray), ``stopping`` (signals and systemic failures),
``parent`` (the search's own MLflow run), ``outcome`` (summaries) and ``run`` (the experiment itself).
"""
