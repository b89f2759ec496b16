"""The pipeline: token ids -> training and evaluation batches.

``lm_dataset.py`` (a corpus encoded once, (input, target) windows drawn as a pure function of the step),
``mt_batching.py`` (sentence pairs encoded with a joint BPE, cut to the length limit, grouped into token-budget
batches with padding masks), ``documents.py`` (fine-tuning text split into documents, each ending in ``<eos>``).
"""
