"""Results, read from MLflow alone: tables (best configuration, Table 2, seeds) and their formats, best
configurations as files, plots, and the ``status`` of a running search.
"""
