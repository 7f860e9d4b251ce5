"""Applications on top of the library: the one-command demo (``demo``) and the layer analysis of a trained
checkpoint (``analyze``), which load models and data and run searches, so they sit beside the command line."""
