"""attnkit: the Transformer built by hand in PyTorch."""

__version__ = "0.1.0"
