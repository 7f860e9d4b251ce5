"""Deciding what to run: a search space (``space``: models, tasks, methods, domains, groups), its YAML file (``file``,
``domains``) and the cost model that orders and prices its trials (``cost``)."""
