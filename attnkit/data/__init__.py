"""attnkit.data: where text comes from and how it becomes token ids and batches, in three parts.

* :mod:`attnkit.data.tokenizers` -- text <-> token ids: the one ``Tokenizer`` interface (``tokenizer.py``),
  character-level, byte-level BPE, GPT-2's tokenizer, and chat templates.
* :mod:`attnkit.data.corpora` -- the recipes (``shakespeare``, ``fortunes``, ``de-en`` and the Debian sources
  it is built from, with the filters that admit a sentence pair), fetched from the package registries, and the
  readers of local text and parallel files: what ``--data`` names.
* :mod:`attnkit.data.pipeline` -- from token ids to training batches: LM windows (``lm_dataset.py``),
  translation batches (``mt_batching.py``: joint BPE, length cuts, token-budget buckets, masks) and the
  documents of fine-tuning text (``documents.py``).

Shared by all three: ``fetch.py`` (the package-registry fetches and the cache folder) and ``json_files.py``
(reading JSON a user may have damaged). The parts import downwards only: tokenizers < corpora < pipeline.
"""
