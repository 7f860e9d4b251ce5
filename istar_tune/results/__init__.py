"""Results, read from MLflow alone: tables (best configuration, Table 2, seeds), plots, the ``status`` of a
running search, the layer analysis of a checkpoint, and the one-command demo.
"""
