"""The prepared device check: every GPU-specific part of istar-tune measured on whatever machine runs it,
``python -m benchmarks.device --out DIR ...`` from the repository's root (``benchmarks/README.md``).

``__main__`` is the runner, ``common`` what the sections share, ``sections/`` a module per section, ``search`` the
second call (a real search against its configurations one by one), ``prepare`` what travels to a lent GPU machine
and the calls' command lines; ``records/`` holds each device run's raw files.
"""
