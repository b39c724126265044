"""dojo: fine-tune open LLMs with DeepSpeed from one honest command line."""

__version__ = "0.1.0"
