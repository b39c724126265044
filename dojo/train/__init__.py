"""dojo train: run config, launch, the worker and its data pipeline."""
