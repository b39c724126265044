"""The training process (one per rank): the only modules of dojo that import torch and the
training stack. ``python -m dojo.train.worker --config RUN_DIR/run.json`` runs ``main.main``."""
