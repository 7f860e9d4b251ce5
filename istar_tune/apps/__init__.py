"""Applications on top of the library, which load models and data and run searches or processes, so they sit beside
the command line: the one-command demo (``demo``), the layer analysis of a trained checkpoint (``analyze``), and the
measurement of co-located training processes (``calibrate``: the packing a machine holds best; ``calibrate_options``:
what it is asked to measure, checked once for the command line and a Python caller)."""
