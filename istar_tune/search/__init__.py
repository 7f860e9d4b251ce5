"""Search: from a search-space YAML to one Ray Tune experiment, its trials recorded in MLflow.

``spaces/`` decides what to run (the space, its YAML file, the cost model, ``--strategy-from``); ``backends/`` hands
out a group's trials and ``schedulers/`` stops its weak ones (one module each, a registry; ``plugins`` adds those of
installed distributions); ``tune/`` is what runs inside Ray Tune (the trial, its checkpoints, the per-group searcher
and scheduler, the MLflow logger, Tune's state, the rehearsal stand-in); the modules here drive one experiment:
``experiment`` (the searches of one Tune experiment, checked and planned), ``shard`` (a job array's share of their
(model, task) pairs), ``plan`` (each group's trials), ``dry_run`` (the report of a plan: epochs, memory, GPU-hours),
``preflight`` (checks before anything starts), ``guard`` (one search per results folder), ``cluster`` (joining Ray),
``stopping`` (signals and systemic failures), ``system_metrics`` (every node's load, sampled into the search's run),
``parent`` (the search's own MLflow run), ``logged_models`` (each group's best checkpoint as an MLflow model),
``qa_pyfunc`` (the extractive-QA model as MLflow serves it, saved with each QA model, never imported here),
``outcome`` (summaries) and ``run`` (the experiment itself).
"""
