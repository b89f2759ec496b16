"""attnkit speed benchmarks, side by side with HF transformers and torch.nn: run ``python -m benchmarks --help``."""
