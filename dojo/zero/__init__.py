"""DeepSpeed ZeRO JSON: build it (``build``), lint a file (``check``), say what it means (``explain``)."""

from dojo.zero.build import PRESETS as PRESETS
from dojo.zero.build import build_ds_config as build_ds_config
