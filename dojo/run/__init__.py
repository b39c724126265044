"""The model of a run behind every command: ``catalog`` (every option, once), ``options`` (how
a value is parsed), ``inputs`` (default < --config file < flag), ``machine`` (where it runs),
``resolve`` (the one resolver), ``resolved`` (``ResolvedRun``), ``render`` (DeepSpeed JSON and
estimate setup from it)."""
