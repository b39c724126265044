"""The run's options, one small frozen dataclass per concern. Each field is declared once with
its type, default, help and the reason for the default (``dojo.run.field.opt``); the "auto" rules
and cross-field checks of a group live in the group's module."""
