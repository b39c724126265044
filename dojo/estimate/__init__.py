"""GPU and host memory of a DeepSpeed fine-tune: ``setup`` (what is estimated), ``model`` (the
terms, with ``activations``, ``comm``, ``quant``, ``moe``, ``reserve`` and ``host``), ``result``
(the MemoryEstimate), ``table`` (how it is shown)."""

from dojo.estimate.comm import comm_buffer_bytes as comm_buffer_bytes
from dojo.estimate.model import estimate as estimate
from dojo.estimate.model import validate as validate
from dojo.estimate.result import GIB as GIB
from dojo.estimate.result import MemoryEstimate as MemoryEstimate
from dojo.estimate.setup import Calibration as Calibration
from dojo.estimate.setup import Setup as Setup
