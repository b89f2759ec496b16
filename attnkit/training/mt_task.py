"""Translation as a training :class:`~attnkit.training.task.Task`: teacher-forced encoder-decoder training.

The data side is ``attnkit.data.pipeline.mt_batching``: tokenized pairs (:class:`~attnkit.data.pipeline.mt_batching.EncodedPairs`)
are grouped by length into batches under a token budget (:class:`~attnkit.data.pipeline.mt_batching.TokenBudgetBatcher`)
and padded into an :class:`~attnkit.data.pipeline.mt_batching.MTBatch`::

    src      Er  lobte  ihre  Kochkunst  .  <eos>       (B, S)  encoder input
    tgt_in   <bos>  He  praised  her  cooking  .        (B, T)  decoder input
    labels   He  praised  her  cooking  .  <eos>        (B, T)  what each position predicts (-100 = padding)

This task adds what training needs on top: the loss (cross-entropy over non-padding labels, optionally
label-smoothed; the paper uses 0.1) and the evaluation (*unsmoothed* validation loss, perplexity and, with a
``translate_fn``, corpus BLEU from sacrebleu on the first validation sentences).

Batch ``step`` of the training split is a pure function of (seed, step) (the batcher's plan for epoch
``step // n_batches``), so a resumed run needs only the step number. Validation batch ``i`` is the i-th
batch of one fixed plan (the epoch-0 plan, shuffled once), so the first ``n_batches`` validation batches are
the same at every evaluation *and* a fair sample of sentence lengths (not just the shortest sentences).

**Annealing on in-domain data** (``anneal`` + ``anneal_share``): for the last ``anneal_share`` of the run's
budget (its steps, its ``--max-time``, or whichever ends first: ``TrainConfig.budget_used``) every training batch
comes from a second, smaller set of pairs, e.g. the training pairs of the test's domain, while the learning rate
decays: the model learns the language from all the data, then specialises (Luong & Manning 2015 adapt a
trained model to a new domain by continuing its training on in-domain data; language-model pretraining
"anneals" on its best data at the end). The trainer tells the task how much of the budget is used
(:meth:`MTTask.on_budget`, before every update); the task switches once and records the batch index where it
did in its state, so a resumed run continues with the same batches. With ``anneal_replay`` R > 0 the anneal
phase also *replays* R training pairs per anneal pair (a fixed random sample): fine-tuning on one domain
alone makes a model forget the others, and mixing some of the old data back in is the usual remedy.

From files in one call: :meth:`MTTask.from_data` reads a prepared folder (``attnkit data prepare de-en``), a
TSV or two line-aligned files, trains a joint BPE (or takes a tokenizer), encodes with a length limit and
builds the task (with the tokenizer, texts and references attached).

Label smoothing (Szegedy et al. 2016; ε = 0.1 in "Attention Is All You Need", the default here): the target
distribution puts ``1 - ε`` on the reference token and ``ε`` spread uniformly over the vocabulary, which keeps
the model from becoming over-confident and usually improves BLEU at the price of a higher perplexity.

Axis legend: B batch (sentence pairs), S source length, T target length, V target vocabulary.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_int, is_number
from attnkit.data.pipeline.mt_batching import (BT_TAG, IGNORE_INDEX, EncodedPairs, MTBatch, TokenBudgetBatcher,
                                               tag_sources)

from attnkit.generation.generate import model_device
from attnkit.generation.translate import greedy_translator
from attnkit.modules.chunked_cross_entropy import chunked_cross_entropy, head_vocab_size

from .task import check_split, check_step, move_to_device

# (model, [source ids (with <eos>), ...]) -> [hypothesis text, ...]
TranslateFn = Callable[[nn.Module, list[list[int]]], list[str]]


def _pairs_fingerprint(data: EncodedPairs) -> str:
    """The pairs' ``content_id`` when they come from a token store, else a hash of every pair's ids."""
    return data.content_id or _hash_of_pairs(data)


def _hash_of_pairs(data: EncodedPairs) -> str:
    """A hash of every pair's ids (what runs recorded before the token store; slow on millions of pairs)."""
    import hashlib

    h = hashlib.blake2b(digest_size=12)
    for s, t in zip(data.src, data.tgt):
        h.update((",".join(map(str, s)) + "|" + ",".join(map(str, t)) + ";").encode())
    return h.hexdigest()


def _check_max_label(max_label: int, V: int) -> None:
    """The batch's largest label id (counted on the host) must be in the target vocabulary ``[0, V)``; not checked
    inside ``torch.compile`` (see :meth:`MTTask._cross_entropy`)."""
    if not torch.compiler.is_compiling() and max_label >= V:
        raise ValueError(f"MTTask: label id {max_label} is outside the model's target vocabulary [0, {V})")


def _chunked_loss(h: torch.Tensor, head: nn.Module, *, labels: torch.Tensor, max_label: int, chunks: int,
                  smoothing: float) -> torch.Tensor:
    """:meth:`MTTask._cross_entropy`'s loss (label-smoothed, over the labels that are not ``IGNORE_INDEX``) from the
    decoder's final states and the output layer, over ``chunks`` checkpointed row chunks
    (:func:`~attnkit.modules.chunked_cross_entropy.chunked_cross_entropy`): the model's ``output_fn``.

    Shape: h ``(B, T, C)``, labels ``(B, T)`` -> 0-dim.
    """
    _check_max_label(max_label, head_vocab_size(head))
    return chunked_cross_entropy(h, head, labels, chunks=chunks, ignore_index=IGNORE_INDEX, label_smoothing=smoothing)


class MTTask:
    """Sequence-to-sequence training on tokenized sentence pairs.

    Args:
        train / valid: :class:`EncodedPairs` (from ``attnkit.data.pipeline.mt_batching.encode_pairs``).
        max_tokens: token budget per batch, ``B * max(S, T)`` (the batcher's measure); every pair must fit.
        seed: data-order seed.
        label_smoothing: ε in [0, 1) (default 0.1), applied to the training loss only.
        translate_fn: optional ``(model, [source ids, ...]) -> [hypothesis text, ...]``; enables BLEU.
            :func:`greedy_translator` builds one from a tokenizer.
        references: reference texts of ``valid`` (same order), required with ``translate_fn``.
        bleu_sentences: how many validation sentences (from the start) are translated per evaluation.
        word_dropout: probability in [0, 1) that a source token (not ``<eos>``, ``<bt>`` or padding) is replaced by
            ``unk_id`` in a *training* batch (Sennrich & Zhang 2019 use 0.1-0.3 on small data); 0 = off. It
            draws from torch's global generator, which the trainer seeds and checkpoints.
        unk_id: the id that word dropout writes (``<unk>`` = 3 in the joint BPE).
        n_samples: how many of the translated validation sentences are kept in :attr:`last_samples` as
            ``(source, reference, hypothesis)`` for printing (see :meth:`eval_report`).
        anneal: optional :class:`EncodedPairs` (same special ids as ``train``) that every training batch comes
            from once ``anneal_share`` of the budget is left (see the module docstring).
        anneal_share: the final share of the budget, in (0, 1), that trains on ``anneal`` (required with it).
        anneal_replay: with ``anneal``, how many training pairs per anneal pair join the anneal phase (>= 0; a
            fixed random sample of ``train``, at most all of it): *replay*, so that the model keeps what it knew of
            the other domains while it specialises. 0 (the default) anneals on ``anneal`` alone.
        shape_multiple: 1 (the default), or *fixed shapes* for the training (and anneal) batches: widths rounded up
            to this multiple and every batch padded to ``(rows(W), W)`` (``max_tokens // W`` rows, fewer for a small
            corpus), one of about
            ``longest / shape_multiple`` shapes (``attnkit.data.pipeline.mt_batching``). CUDA graphs need it
            (``TrainConfig.cuda_graphs``); validation batches keep their own shapes.

    Shape:
        ``batch(split, step) -> MTBatch``: src ``(B, S)``, tgt_in / labels ``(B, T)``, masks ``(B, S)`` / ``(B, T)``.
        ``loss(model, batch)``: ``model(src, tgt_in, src_key_padding_mask=, tgt_key_padding_mask=)`` must
        return logits ``(B, T, V)``; returns (mean loss over non-padding labels, their count).
    """

    # K >= 1: in training (with gradients on) the loss is chunked_cross_entropy over K row chunks, the decoder's
    # final states given to it by ``model(..., output_fn=)``: no (B, T, V) logits kept for the backward pass. The
    # trainer sets it (TrainConfig.loss_chunks); 0 is the plain loss.
    loss_chunks: int = 0

    def __init__(self, train: EncodedPairs, valid: EncodedPairs, *, max_tokens: int, seed: int = 0,
                 label_smoothing: float = 0.1, translate_fn: TranslateFn | None = None,
                 references: Sequence[str] | None = None, bleu_sentences: int = 200,
                 word_dropout: float = 0.0, unk_id: int = 3, n_samples: int = 3,
                 anneal: EncodedPairs | None = None, anneal_share: float | None = None,
                 anneal_replay: float = 0.0, shape_multiple: int = 1):
        for name, data in (("train", train), ("valid", valid)) + ((("anneal", anneal),) if anneal is not None else ()):
            if not isinstance(data, EncodedPairs):
                raise ValueError(f"MTTask {name} must be EncodedPairs (attnkit.data.pipeline.mt_batching.encode_pairs), "
                                 f"got {type(data).__name__}")
            if len(data) == 0:
                raise ValueError(f"MTTask {name} must hold at least one pair, got 0")
        for name, value, low in (("max_tokens", max_tokens, 1), ("seed", seed, 0), ("bleu_sentences", bleu_sentences, 1),
                                 ("unk_id", unk_id, 0), ("n_samples", n_samples, 0),
                                 ("shape_multiple", shape_multiple, 1)):
            check_int(f"MTTask {name}", value, minimum=low)
        if not is_number(label_smoothing) \
                or not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"MTTask label_smoothing must be in [0, 1), got {label_smoothing!r}")
        if not is_number(word_dropout) or not 0.0 <= word_dropout < 1.0:
            raise ValueError(f"MTTask word_dropout must be in [0, 1), got {word_dropout!r}")
        if (anneal is None) != (anneal_share is None):
            got = "None" if anneal is None else f"of {len(anneal)} pairs"
            raise ValueError(f"MTTask anneal and anneal_share go together, got anneal {got} and anneal_share "
                             f"{anneal_share!r}")
        if anneal is not None:
            if not is_number(anneal_share) or not 0.0 < anneal_share < 1.0:
                raise ValueError(f"MTTask anneal_share must be in (0, 1), got {anneal_share!r}")
            ids = {k: getattr(train, k) for k in ("pad_id", "bos_id", "eos_id")}
            got = {k: getattr(anneal, k) for k in ids}
            if got != ids:
                raise ValueError(f"MTTask anneal pairs must use the training pairs' special ids {ids}, got {got}")
        if not is_number(anneal_replay) or not 0.0 <= anneal_replay < math.inf:
            raise ValueError(f"MTTask anneal_replay must be a number >= 0, got {anneal_replay!r}")
        if anneal_replay > 0 and anneal is None:
            raise ValueError(f"MTTask anneal_replay {anneal_replay:g} needs anneal pairs (the pairs to anneal on)")
        if translate_fn is not None:
            if not callable(translate_fn):
                raise ValueError(f"MTTask translate_fn must be callable, got {type(translate_fn).__name__}")
            if references is None or len(references) != len(valid):
                raise ValueError(f"MTTask references must hold one text per validation pair ({len(valid)}) "
                                 f"when translate_fn is given, got "
                                 f"{'None' if references is None else len(references)}")
        self.train, self.valid = train, valid
        self.max_tokens, self.seed = max_tokens, seed
        self.label_smoothing = float(label_smoothing)
        self.translate_fn = translate_fn
        self.references = None if references is None else [str(r) for r in references]
        self.bleu_sentences = bleu_sentences
        self.word_dropout, self.unk_id, self.n_samples = float(word_dropout), unk_id, n_samples
        # (source text, reference, hypothesis) of the first n_samples sentences of the last BLEU evaluation
        self.last_samples: list[tuple[str, str, str]] = []
        # The batchers validate max_tokens against the longest pair (ValueError naming both).
        # Validation always uses the batcher's epoch-0 plan (see batch()): fixed, and shuffled once so that a
        # prefix of it is a representative sample.
        self.shape_multiple = shape_multiple
        self.batchers = {"train": TokenBudgetBatcher(train, max_tokens=max_tokens, seed=seed, shuffle=True,
                                                     multiple=shape_multiple),
                         "valid": TokenBudgetBatcher(valid, max_tokens=max_tokens, seed=seed, shuffle=True)}
        # Filled by from_data (None / 0 when the task is built from EncodedPairs directly).
        self.tokenizer: Any = None
        self.corpora: dict[str, tuple[list[str], list[str]]] = {}
        self.skipped: dict[str, int] = {"train": 0, "valid": 0}
        self.valid_split: dict[str, Any] | None = None  # the counts of a validation part split off the data
        self.synthetic: dict[str, Any] | None = None  # from_data with back-translated pairs: their counts and tag
        self._fingerprints = {"train": _pairs_fingerprint(train), "valid": _pairs_fingerprint(valid)}
        self.anneal, self.anneal_share = anneal, None if anneal_share is None else float(anneal_share)
        self.anneal_from: int | None = None  # the first training batch index drawn from ``anneal``
        self.anneal_replay = float(anneal_replay)
        self.n_replayed = 0  # training pairs that join the anneal phase (see anneal_replay)
        if anneal is not None:
            mixed = self._with_replay(anneal)
            self.n_replayed = len(mixed) - len(anneal)
            self.batchers["anneal"] = TokenBudgetBatcher(mixed, max_tokens=max_tokens, seed=seed, shuffle=True,
                                                         multiple=shape_multiple)
            self._fingerprints["anneal"] = _pairs_fingerprint(anneal)

    def _with_replay(self, anneal: EncodedPairs) -> EncodedPairs:
        """The anneal pairs followed by ``round(anneal_replay * len(anneal))`` training pairs (at most all), drawn
        without replacement from a generator seeded with the task's seed: the same pairs in every run and resume."""
        wanted = self.anneal_replay * len(anneal)  # 1e308 pairs per anneal pair is inf: all of them, not an overflow
        k = len(self.train) if wanted >= len(self.train) else round(wanted)
        if k == 0:
            return anneal
        import numpy as np

        picked = np.sort(np.random.default_rng([self.seed, 7]).choice(len(self.train), size=k, replace=False))
        return EncodedPairs(list(anneal.src) + [self.train.src[i] for i in picked],
                            list(anneal.tgt) + [self.train.tgt[i] for i in picked],
                            pad_id=anneal.pad_id, bos_id=anneal.bos_id, eos_id=anneal.eos_id,
                            n_truncated_src=anneal.n_truncated_src, n_truncated_tgt=anneal.n_truncated_tgt)

    # --------------------------------------------------------------------------------------------
    @classmethod
    def from_data(cls, data: str | Path | Sequence[str | Path], *, valid: str | Path | Sequence[str | Path] | None = None,
                  tokenizer: Any = None, vocab_size: int = 8000, max_len: int = 256, truncate: bool = True,
                  strict: bool = False, bleu: bool = False, max_tokens: int = 4096,
                  anneal: str | Path | Sequence[str | Path] | None = None, verify: bool = True,
                  reverse: bool = False, synthetic: str | Path | None = None, synthetic_ratio: float = 1.0,
                  **kwargs: Any) -> "MTTask":
        """Build a task from files.

        Args:
            data: a prepared folder (its ``train.tsv`` and, unless ``valid`` is given, ``valid.tsv``), a TSV file,
                or two line-aligned files ``[source, target]`` (see :func:`attnkit.data.corpora.parallel.load_parallel`).
            valid: the validation data in the same forms. Without it a folder gives its ``valid.tsv`` and a file
                (or two) gets a validation part split off (:func:`attnkit.data.corpora.parallel.split_off_valid`: seeded,
                10% of the pairs, at most 1,000, disjoint from the training part); ``task.valid_split`` then holds
                the split's counts (None when nothing was split).
            tokenizer: the tokenizer to use; ``None`` trains a joint BPE of ``vocab_size`` on the training pairs
                (:func:`attnkit.data.pipeline.mt_batching.train_joint_bpe`). Either way it is ``task.tokenizer``.
            max_len: longest source (with ``<eos>``) / target (with ``<bos>``) the model takes, e.g. its
                ``config.max_len``. Longer sentences are cut (``task.n_truncated``) or, with ``truncate=False``,
                refused with a ``ValueError``.
            strict: refuse malformed input lines instead of skipping and counting them (``task.skipped``).
            bleu: compute BLEU during evaluation with :func:`greedy_translator` (references = valid targets).
            anneal: the pairs to anneal on, a TSV file or two line-aligned files (a prepared folder: its
                ``in-domain.tsv``), encoded with the same tokenizer and length limit; needs ``anneal_share``. With a
                validation part split off ``data``, anneal pairs sharing a source sentence with it are dropped too
                (counted in ``task.valid_split["anneal_dropped"]``).
            verify: check a reused token store's checksums (the pairs' ids are encoded once into token stores,
                :func:`attnkit.data.pipeline.mt_store.encode_pairs_stored`, and read from them).
            reverse: train the other direction: every pair of ``data``, ``valid`` and ``anneal`` swapped (target →
                source), validation and BLEU included.
            synthetic: a back-translation file (``attnkit translate --output``: ``sentence<TAB>translation``, read
                by :func:`attnkit.data.corpora.parallel.read_back_translations` as (translation, sentence) pairs).
                ``round(synthetic_ratio * len(training pairs))`` of its pairs (the whole file over again when it has
                fewer, then a sample drawn with a generator seeded by ``seed``) join the training pairs, each source
                tagged with :data:`~attnkit.data.pipeline.mt_batching.BT_TAG` (tagged back-translation, see
                :meth:`mix_synthetic`). A BPE trained here then has ``<bt>`` as its special id 4; a given
                tokenizer must have it as one special token.
            synthetic_ratio: synthetic pairs per real training pair (> 0).
            max_tokens, **kwargs: passed to the constructor (``seed``, ``label_smoothing``, ``bleu_sentences``,
                ``word_dropout``, ``n_samples``, ``anneal_share``, ``anneal_replay``); ``unk_id`` defaults to the
                tokenizer's.
        """
        from attnkit.data.pipeline.mt_batching import train_joint_bpe
        from attnkit.data.pipeline.mt_store import encode_pairs_stored
        from attnkit.data.corpora.parallel import load_train_valid

        train_corpus, valid_corpus, split = load_train_valid(data, valid, strict=strict, reverse=reverse)
        for name, corpus in (("train", train_corpus), ("valid", valid_corpus)):
            if len(corpus) == 0:
                raise ValueError(f"MTTask {name} data {corpus.path!r} holds no usable pair "
                                 f"({corpus.skipped} malformed lines skipped)")
        if tokenizer is None:
            tokenizer = train_joint_bpe(train_corpus.sources, train_corpus.targets, vocab_size,
                                        extra_specials=(BT_TAG,) if synthetic is not None else ())
        corpora = {"train": train_corpus, "valid": valid_corpus}
        if anneal is not None:
            from attnkit.data.corpora.parallel import load_in_domain

            corpora["anneal"] = load_in_domain(anneal, strict=strict)
            if reverse:
                corpora["anneal"] = corpora["anneal"].swapped()
            if split is not None:  # anneal pairs are training pairs: none may share a split-off validation source
                corpora["anneal"], split["anneal_dropped"] = cls._without_sources(corpora["anneal"],
                                                                                  set(valid_corpus.sources))
            if len(corpora["anneal"]) == 0:
                dropped = f", {split['anneal_dropped']} shared a validation source" if split else ""
                raise ValueError(f"MTTask anneal data {corpora['anneal'].path!r} holds no usable pair "
                                 f"({corpora['anneal'].skipped} malformed lines skipped{dropped})")
        mixed = None
        where = {name: c.where for name, c in corpora.items()}  # how a too-long pair is named (truncate=False)
        if synthetic is not None:
            mixed = cls.mix_synthetic(train_corpus, valid_corpus, synthetic, tokenizer, ratio=synthetic_ratio,
                                      seed=kwargs.get("seed", 0), strict=strict, anneal=corpora.get("anneal"))
            real, n_real = where["train"], len(train_corpus)
            where["train"] = lambda i: real(i) if i < n_real else f"synthetic pair {i - n_real}"
            train_corpus = corpora["train"] = mixed["train"]
        enc = {name: encode_pairs_stored(tokenizer, c.sources, c.targets, max_src_len=max_len, truncate=truncate,
                                         verify=verify, where=where[name])
               for name, c in corpora.items()}
        if "anneal" in enc:
            kwargs["anneal"] = enc.pop("anneal")
        if bleu:
            kwargs.setdefault("translate_fn", greedy_translator(tokenizer))
            kwargs.setdefault("references", valid_corpus.targets)
        if getattr(tokenizer, "unk_id", None) is not None:
            kwargs.setdefault("unk_id", tokenizer.unk_id)
        task = cls(enc["train"], enc["valid"], max_tokens=max_tokens, **kwargs)
        task.tokenizer = tokenizer
        task.corpora = {"train": (train_corpus.sources, train_corpus.targets),
                        "valid": (valid_corpus.sources, valid_corpus.targets)}
        task.skipped = {name: c.skipped for name, c in corpora.items()}
        task.valid_split = split
        if mixed is not None:
            task.synthetic = {k: v for k, v in mixed.items() if k != "train"}
            task.skipped["synthetic"] = mixed["skipped"]
        return task

    @staticmethod
    def _without_sources(corpus: Any, sources: set[str]) -> tuple[Any, int]:
        """``(corpus minus every pair whose source is in sources, how many were removed)``."""
        from attnkit.data.corpora.parallel import ParallelCorpus

        keep = [i for i, s in enumerate(corpus.sources) if s not in sources]
        if len(keep) == len(corpus):
            return corpus, 0
        lines = None if corpus.lines is None else [corpus.lines[i] for i in keep]
        return ParallelCorpus([corpus.sources[i] for i in keep], [corpus.targets[i] for i in keep],
                              list(corpus.skipped_lines), corpus.path, lines), len(corpus) - len(keep)

    @staticmethod
    def mix_synthetic(train: Any, valid: Any, path: str | Path, tokenizer: Any, *, ratio: float, seed: int,
                      strict: bool = False, anneal: Any = None) -> dict[str, Any]:
        """Real training pairs plus back-translated ones, each synthetic source tagged with ``<bt>``.

        ``train``/``valid`` (and ``anneal``, optional): :class:`~attnkit.data.corpora.parallel.ParallelCorpus` of the
        real pairs; ``path``: a back-translation file. ``k = round(ratio * len(train))`` synthetic pairs follow the
        real ones: the whole file ``k // n`` times over (``n`` pairs in the file), then ``k % n`` pairs drawn without
        replacement from ``numpy.random.default_rng([seed, 13])``, each part in file order: the same pairs in every
        run and resume with that seed. The tag must be one special token of ``tokenizer`` (so it reaches the model as
        one id that BPE never splits) and appear in no real sentence (training, validation or anneal pairs).
        Returns ``{"train": the mixed corpus, "pairs": k, "available": pairs in the file, "skipped": malformed lines
        of the file, "ratio": k / len(train), "copies": whole passes over the file, "tag": BT_TAG,
        "tag_id": its id}``.
        """
        import numpy as np

        from attnkit.data.corpora.parallel import ParallelCorpus, read_back_translations

        if not is_number(ratio) or not 0.0 < ratio < math.inf:
            raise ValueError(f"synthetic_ratio must be a number > 0, got {ratio!r}")
        tag_id = tokenizer.token_to_id(BT_TAG)
        if tag_id is None or tokenizer.encode(BT_TAG) != [tag_id]:
            raise ValueError(f"synthetic pairs need the tokenizer to have {BT_TAG!r} as one special token (a BPE "
                             f"trained by train mt with synthetic data has it as id 4); this tokenizer encodes it as "
                             f"{tokenizer.encode(BT_TAG)}")
        real = (train, valid) + ((anneal,) if anneal is not None else ())
        tagged_real = sum(BT_TAG in s for corpus in real for s in (*corpus.sources, *corpus.targets))
        if tagged_real:
            raise ValueError(f"{tagged_real} real sentences (sources or targets) contain the back-translation tag "
                             f"{BT_TAG!r}, which marks synthetic sources; remove it from the real data")
        corpus = read_back_translations(path, strict=strict)
        if len(corpus) == 0:
            raise ValueError(f"synthetic data {str(path)!r} holds no usable pair ({corpus.skipped} malformed or "
                             f"empty lines skipped)")
        k = round(ratio * len(train))
        if k == 0:
            raise ValueError(f"synthetic_ratio {ratio:g} of {len(train)} training pairs takes no synthetic pair")
        copies, rest = divmod(k, len(corpus))
        sample = np.random.default_rng([seed, 13]).choice(len(corpus), size=rest, replace=False)
        picked = list(range(len(corpus))) * copies + np.sort(sample).tolist()
        mixed = ParallelCorpus(list(train.sources) + tag_sources([corpus.sources[i] for i in picked]),
                               list(train.targets) + [corpus.targets[i] for i in picked],
                               list(train.skipped_lines), train.path)
        return {"train": mixed, "pairs": k, "available": len(corpus), "skipped": corpus.skipped,
                "ratio": k / len(train), "copies": copies, "tag": BT_TAG, "tag_id": tag_id}

    # --------------------------------------------------------------------------------------------
    @property
    def n_truncated(self) -> dict[str, int]:
        """Sentences cut to the length limit when encoding, per split (sources and targets together)."""
        parts = (("train", self.train), ("valid", self.valid)) + ((("anneal", self.anneal),) if self.anneal is not None else ())
        return {name: d.n_truncated_src + d.n_truncated_tgt for name, d in parts}

    def num_batches(self, split: str) -> int:
        """Batches per epoch of ``split``."""
        check_split(split)
        return self.batchers[split].num_batches

    def padding_ratio(self, split: str = "train") -> dict[str, float]:
        """Fraction of padding positions in ``split``'s batches: ``{"src", "tgt", "total"}``."""
        check_split(split)
        return self.batchers[split].padding_ratio()

    def batch(self, split: str, step: int) -> MTBatch:
        """Batch number ``step`` of ``split`` (see the class docstring for shapes).

        Train: batch ``step % n`` of epoch ``step // n``; from ``anneal_from`` on (see :meth:`on_budget`), batch
        ``step - anneal_from`` of the anneal pairs, in the same way. Valid: batch ``step % n`` of the one fixed plan.
        """
        check_split(split)
        check_step(step)
        batcher = self.batchers[split]
        if split == "valid":
            step %= batcher.num_batches
        elif self.anneal_from is not None and step >= self.anneal_from:
            return self.batchers["anneal"].batch(step - self.anneal_from)
        return batcher.batch(step)

    @property
    def dynamic_shapes(self) -> bool:
        """True when the training batches come in any shape (``shape_multiple`` 1): ``compile=True`` then compiles
        the loss once for every shape instead of once for the first batch and again for the second."""
        return self.shape_multiple == 1

    def on_budget(self, step: int, fraction: float) -> str | None:
        """Called by the trainer before each update: ``step`` is the update's first training batch index and
        ``fraction`` the share of the run's budget used so far. The first time ``fraction >= 1 - anneal_share``
        the task switches to the anneal pairs from batch ``step`` on and returns a line saying so (else None)."""
        check_step(step)
        # (with a hair of tolerance: 3 / 10 of the steps is below 1 - 0.7 in floating point)
        if self.anneal is None or self.anneal_from is not None or fraction < 1.0 - self.anneal_share - 1e-9:
            return None
        self.anneal_from = step
        pairs = (f"{len(self.anneal):,} anneal pairs and {self.n_replayed:,} replayed training pairs" if self.n_replayed
                 else f"{len(self.anneal):,} anneal pairs only")
        return f"batch {step:,} ({fraction:.0%} of the budget): the last {self.anneal_share:.0%} trains on the {pairs}"

    def _logits(self, model: nn.Module, b: MTBatch) -> torch.Tensor:
        logits = model(b.src, b.tgt_in, src_key_padding_mask=b.src_key_padding_mask,
                       tgt_key_padding_mask=b.tgt_key_padding_mask)
        if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != b.tgt_in.shape:
            got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise ValueError(f"MTTask: model(src, tgt_in) must return logits (B, T, V) = "
                             f"({b.tgt_in.shape[0]}, {b.tgt_in.shape[1]}, V), got {got}")
        return logits

    @staticmethod
    def _cross_entropy(logits: torch.Tensor, b: MTBatch, smoothing: float) -> tuple[torch.Tensor, int]:
        """Mean cross-entropy of ``logits`` ``(B, T, V)`` against ``b.labels`` and the number of labels.

        The label-id check and the count use the batch's host-side counts: nothing is read back from the device.
        Inside ``torch.compile`` (the trainer's ``compile=True`` compiles :meth:`loss` with the model) the largest
        label is not read, so that it does not become part of the compiled code's guards (a recompilation for every
        new value); the compiled cross-entropy checks its targets itself (an error on the CPU, a device-side assert
        on CUDA).
        """
        V = logits.shape[-1]
        _check_max_label(b.max_label, V)
        loss = F.cross_entropy(logits.float().reshape(-1, V), b.labels.reshape(-1),  # (B*T, V) vs (B*T,)
                               ignore_index=IGNORE_INDEX, label_smoothing=smoothing)
        return loss, b.n_tokens

    def loss(self, model: nn.Module, batch: MTBatch) -> tuple[torch.Tensor, int]:
        """Label-smoothed cross-entropy over non-padding labels, and their number.

        Shape: batch src ``(B, S)``, tgt_in / labels ``(B, T)``; returns a 0-dim loss.
        """
        if self.word_dropout > 0 and model.training:
            batch = self._drop_words(batch)
        if self.loss_chunks and model.training and torch.is_grad_enabled():
            b = batch
            loss_of = functools.partial(_chunked_loss, labels=b.labels, max_label=b.max_label, chunks=self.loss_chunks,
                                        smoothing=self.label_smoothing)
            loss = model(b.src, b.tgt_in, src_key_padding_mask=b.src_key_padding_mask,
                         tgt_key_padding_mask=b.tgt_key_padding_mask, output_fn=loss_of)
            return loss, b.n_tokens
        return self._cross_entropy(self._logits(model, batch), batch, self.label_smoothing)

    @staticmethod
    def count_tokens(batch: MTBatch) -> int:
        """The number of labels ``loss`` averages over, counted on the host (no device read)."""
        return batch.n_tokens

    def _drop_words(self, b: MTBatch) -> MTBatch:
        """``b`` with each real source token except ``<eos>`` and the back-translation tag replaced by ``unk_id``
        with probability ``word_dropout`` (src ``(B, S)``; the masks and the target side are unchanged)."""
        keep = b.src_key_padding_mask | (b.src == self.train.eos_id)  # (B, S) padding and <eos> stay
        if self.synthetic is not None:  # so does <bt>: it marks a synthetic pair, it is not a word
            keep |= b.src == self.synthetic["tag_id"]
        drop = (torch.rand(b.src.shape, device=b.src.device) < self.word_dropout) & ~keep
        return b._replace(src=b.src.masked_fill(drop, self.unk_id))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, n_batches: int) -> dict[str, float]:
        """Unsmoothed validation loss and perplexity over the first ``n_batches`` validation batches (at most
        one pass), plus ``"bleu"`` (sacrebleu corpus BLEU, 0-100) when ``translate_fn`` is set."""
        check_int("n_batches", n_batches, minimum=1)
        device = model_device(model)
        total, count = torch.zeros((), dtype=torch.float64, device=device), 0
        for i in range(min(n_batches, self.batchers["valid"].num_batches)):
            b = move_to_device(self.batch("valid", i), device)
            loss, n = self._cross_entropy(self._logits(model, b), b, 0.0)
            total += loss.double() * n  # summed on the device, read once below
            count += n
        mean = float(total) / count
        out = {"loss": mean, "ppl": math.exp(min(mean, 700.0))}  # exp overflows a float past ~709
        if self.translate_fn is not None:
            scores = self.translation_scores(model, self.bleu_sentences)
            out["bleu"], out["chrf"] = scores["bleu"], scores["chrf"]
        return out

    @torch.no_grad()
    def translation_scores(self, model: nn.Module, n_sentences: int | None = None) -> dict[str, Any]:
        """Translate the first ``n_sentences`` validation sources (all when None) with ``translate_fn`` and
        score them (:func:`attnkit.training.bleu.score_translations`): ``{"bleu", "chrf" (0-100), "sentences",
        "hypotheses"}``. Keeps the first ``n_samples`` as :attr:`last_samples`."""
        from attnkit.training.bleu import score_translations

        if self.translate_fn is None:
            raise ValueError("MTTask.translation_scores needs a translate_fn (MTTask.from_data(..., bleu=True))")
        k = len(self.valid) if n_sentences is None else min(n_sentences, len(self.valid))
        if k < 1:
            raise ValueError(f"n_sentences must be >= 1 (or None for all), got {n_sentences!r}")
        model = getattr(model, "module", model)  # the trainer evaluates through DDP's wrapper; decoding needs the model
        was_training = model.training
        model.eval()
        try:
            # Decode as at inference: in the weights' own dtype, even when the trainer evaluates under bf16
            # autocast (the decoder's key/value caches hold the parameters' dtype).
            with torch.autocast(device_type=model_device(model).type, enabled=False):
                hyps = self.translate_fn(model, [list(s) for s in self.valid.src[:k]])
        finally:
            model.train(was_training)
        if not isinstance(hyps, list) or len(hyps) != k:
            raise ValueError(f"MTTask translate_fn must return a list of {k} strings, got {type(hyps).__name__}"
                             f"{f' of length {len(hyps)}' if isinstance(hyps, list) else ''}")
        hyps = [str(h) for h in hyps]
        refs = self.references[:k]
        sources = self.corpora.get("valid", (None,))[0]
        self.last_samples = [(sources[i] if sources is not None else " ".join(map(str, self.valid.src[i])),
                              refs[i], hyps[i]) for i in range(min(self.n_samples, k))]
        scores = score_translations(hyps, refs)
        return {"bleu": scores["bleu"], "chrf": scores["chrf"], "sentences": k, "hypotheses": hyps}

    def eval_report(self) -> list[str]:
        """Lines the trainer prints after each evaluation: the sample translations of the last BLEU
        evaluation next to their references (empty without ``translate_fn``)."""
        lines = []
        for src, ref, hyp in self.last_samples:
            lines += [f"  src: {src}", f"  ref: {ref}", f"  out: {hyp}"]
        return lines

    # --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-able description of the data and batching (:meth:`load_state_dict` refuses a different one) and,
        with anneal pairs, ``anneal_from`` (where the run switched to them, None before)."""
        state = {"kind": "mt", "seed": self.seed, "max_tokens": self.max_tokens,
                 "label_smoothing": self.label_smoothing, "pad_id": self.train.pad_id, "bos_id": self.train.bos_id,
                 "eos_id": self.train.eos_id, "n_train": len(self.train), "n_valid": len(self.valid),
                 "train_fingerprint": self._fingerprints["train"], "valid_fingerprint": self._fingerprints["valid"]}
        if self.anneal is not None:
            state.update(n_anneal=len(self.anneal), anneal_share=self.anneal_share,
                         anneal_fingerprint=self._fingerprints["anneal"], anneal_from=self.anneal_from)
            if self.anneal_replay > 0:  # absent at 0, so that runs from before the option resume as they were
                state["anneal_replay"] = self.anneal_replay
        if self.shape_multiple > 1:  # absent at 1 (as anneal_replay at 0): other batches, so resume must match
            state["shape_multiple"] = self.shape_multiple
        if self.synthetic is not None:  # absent without: the training fingerprint covers the mixed pairs already
            state["n_synthetic"] = self.synthetic["pairs"]
        return state

    def _same_pairs(self, key: str, recorded: Any) -> bool:
        """Whether a checkpoint's ``<split>_fingerprint`` from before the token store (a hash of the pairs' ids)
        names this task's stored pairs: such a run resumes unchanged."""
        data = {"train_fingerprint": self.train, "valid_fingerprint": self.valid,
                "anneal_fingerprint": self.anneal}.get(key)
        if data is None or data.content_id is None or not isinstance(recorded, str) or recorded.startswith("store:"):
            return False
        return _hash_of_pairs(data) == recorded

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that a checkpoint was trained on this very task (same pairs, special ids, seed, batching, anneal
        pairs and share), then take its ``anneal_from``."""
        if not isinstance(state, dict):
            raise ValueError(f"MTTask state must be a dict, got {type(state).__name__}")
        mine = self.state_dict()
        mine.pop("anneal_from", None)
        # a checkpoint that annealed is refused by a task that does not (and the other way round)
        keys = list(mine) + [k for k in ("n_anneal", "anneal_share", "anneal_fingerprint", "anneal_replay",
                                         "shape_multiple", "n_synthetic")
                             if k in state and k not in mine]
        diffs = [f"{k} (checkpoint {state.get(k)!r}, now {mine.get(k)!r})" for k in keys
                 if state.get(k) != mine.get(k) and not self._same_pairs(k, state.get(k))]
        if diffs:
            raise ValueError("cannot resume: the translation data differ from the checkpoint's in " + ", ".join(diffs))
        if self.anneal is not None:
            start = state.get("anneal_from")
            if start is not None:
                check_step(start)
            self.anneal_from = start
