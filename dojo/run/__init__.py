"""The model of a run behind every command: ``groups`` (the options, one dataclass per concern,
each with its "auto" rules), ``schema`` (all groups in ``RunOptions``, the option table),
``field`` (how one option is declared and parsed), ``inputs`` (default < --config file < flag),
``machine`` (where it runs), ``resolve`` (the one resolver), ``run`` (``Run``: the resolved
groups), ``render`` (DeepSpeed JSON and estimate setup from it)."""
