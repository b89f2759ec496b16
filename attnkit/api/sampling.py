"""``sample``: generate text from a trained checkpoint or a pretrained model (``attnkit sample``): a named one, a
GGUF file or a Hugging Face folder.

    from attnkit.api import sample
    sample(ckpt="runs/char", prompt="ROMEO:", max_new_tokens=100, seed=1)         # -> ["ROMEO:\\n..."]
    sample(model="smollm2-135m-instruct", prompt="What is 2 + 2?", chat=True, stream=sys.stdout)

:class:`Sampler` loads the model once (on the device, in the autocast precision, its weights stored in the layout
one-token steps read fastest: :func:`attnkit.generation.use_decoding_layout`) and draws samples from it with
:func:`attnkit.generation.generate` (KV cache, greedy or sampled, stop strings, streaming). The prompt is read as
the model reads one (``LoadedModel.encode_prompt``: after a ``<bos>`` where it was trained with one); an empty
prompt starts from ``<bos>`` or a newline.

Past the context the model was trained on (prompt + new tokens longer than its ``block_size``) sampling continues
over a sliding window (see :mod:`attnkit.generation.generate`), and a note says how. There are no tensor axes in
this file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from attnkit.checks import SEED_MAX, check_int, check_seed

from .options import DeviceOptions, Log, check_model_source, default_log, inference_device, place_model

__all__ = ["SampleOptions", "Sampler", "sample"]


@dataclass
class SampleOptions(DeviceOptions):
    """Options of :class:`Sampler` / :func:`sample`: the model (``ckpt``, a run or checkpoint folder; or ``model``,
    a named pretrained model, a ``.gguf`` file or a Hugging Face folder), the prompt (``chat``: wrapped in the
    model's chat template as a user turn, after ``system`` as the system turn when given) and the sampling
    settings (:class:`~attnkit.generation.GenerationConfig`'s, with ``greedy`` for argmax decoding, ``stop`` the
    stop strings, ``use_cache=False`` to recompute the whole context at every step). Sample ``i`` is drawn with
    ``seed + i`` when a seed is given."""

    ckpt: str | Path | None = None
    model: str | Path | None = None
    prompt: str = ""
    chat: bool = False
    system: str | None = None
    max_new_tokens: int = 200
    greedy: bool = False
    temperature: float = 0.8
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    stop: list[str] | None = None
    seed: int | None = None
    num_samples: int = 1
    use_cache: bool = True
    compile: bool = False

    def _check(self) -> None:
        super()._check()
        check_model_source("sample", self.ckpt, self.model)
        if self.system is not None and not self.chat:
            raise ValueError(f"--system is the system turn of a chat prompt and needs --chat, got --system "
                             f"{self.system!r} without it")
        if self.num_samples < 1:
            raise ValueError(f"--num-samples must be >= 1, got {self.num_samples}")
        check_seed("--seed", self.seed)
        if self.seed is not None and self.seed + self.num_samples - 1 > SEED_MAX:
            raise ValueError(f"--seed + --num-samples - 1 must be <= 2**64 - 1 (sample i is drawn with seed + i), "
                             f"got {self.seed} + {self.num_samples} - 1 = {self.seed + self.num_samples - 1}")

    def generation_config(self):
        """The validated :class:`~attnkit.generation.GenerationConfig` (raises ``ValueError`` before any work)."""
        from attnkit.generation import GenerationConfig

        return GenerationConfig(max_new_tokens=self.max_new_tokens, do_sample=not self.greedy,
                                temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
                                repetition_penalty=self.repetition_penalty,
                                no_repeat_ngram_size=self.no_repeat_ngram_size, stop_strings=self.stop, seed=self.seed,
                                use_cache=self.use_cache, compile=self.compile)


def _window_config(gen_cfg: Any, model: Any, n_prompt: int, max_new_tokens: int, log: Log) -> Any:
    """``gen_cfg`` with the sliding window on when prompt + new tokens pass the model's context (with a note)."""
    config = getattr(model, "config", None)
    block = getattr(config, "block_size", None)
    if block is None or max_new_tokens == 0 or n_prompt + max_new_tokens - 1 <= block:  # (0: nothing to sample)
        return gen_cfg
    rope = getattr(config, "position", None) == "rope"
    how = ("recomputed at every token" if not gen_cfg.use_cache
           else "when the KV cache is full its older half is dropped and the kept keys are shifted"
           if rope else "when the KV cache is full its older half is dropped and the cache re-filled")
    log(f"note: {n_prompt} prompt + {max_new_tokens} new tokens exceed the model's context of {block}; sampling "
        f"with a sliding window ({how})")
    if gen_cfg.compile:
        log("note: --compile runs on a fixed cache; the sliding window runs without it")
    return dataclasses.replace(gen_cfg, sliding_window=True, compile=False)


class Sampler:
    """A model loaded for sampling, with its prompt encoded and its generation settings checked.

    Attributes:
        prompt_ids: the prompt as token ids (what the first sample continues).
        shown_prompt: the text a stream shows before the sample (the prompt; nothing for a chat prompt).
        loaded: the :class:`~attnkit.checkpoints.LoadedModel` (its chat template, ``encode_prompt``).
    """

    def __init__(self, options: SampleOptions | None = None, *, log: Log | None = None, **kwargs: Any):
        from attnkit.checkpoints import load
        from attnkit.generation.decoding_layout import use_decoding_layout
        from attnkit.interop.load import load_named

        o = self.options = SampleOptions.make(options, kwargs)
        self._log = log = default_log(log)
        gen_cfg = o.generation_config()  # bad sampling options fail here, before loading or printing anything
        device = inference_device(o)  # so does a device (or autocast) this machine lacks
        # --model: a name, a .gguf file or a folder (Hugging Face, or an attnkit run)
        loaded = self.loaded = load(o.ckpt, expect_kind="lm") if o.ckpt is not None else load_named(str(o.model))
        self.model, self.tokenizer = place_model(loaded.model, o, device), loaded.tokenizer
        use_decoding_layout(self.model)  # same weights, transposed storage: faster one-token steps
        ids = loaded.encode_prompt(loaded.format_chat(o.prompt, o.system) if o.chat else o.prompt)
        if not ids:
            tok = self.tokenizer
            start = tok.bos_id if tok.bos_id is not None else tok.token_to_id("\n")
            if start is None:
                raise ValueError("empty --prompt and the tokenizer has neither a BOS token nor a newline; give "
                                 "--prompt")
            ids = [start]
        self.prompt_ids = ids
        self.shown_prompt = "" if o.chat else o.prompt
        # the shown prompt is the left context of the text after it (a SentencePiece decoder keeps the space between)
        self._context = [] if o.chat else ids
        pad = self.tokenizer.pad_id if self.tokenizer.pad_id is not None else 0
        self._gen_cfg = dataclasses.replace(gen_cfg, eos_token_id=loaded.stop_ids, pad_token_id=pad)
        self.config = _window_config(self._gen_cfg, self.model, len(ids), o.max_new_tokens, log)
        self.config.check_for(self.model, self.tokenizer)

    def sample(self, index: int = 0, *, stream: TextIO | None = None) -> str:
        """Sample number ``index`` (seeded ``seed + index``): the shown prompt followed by the generated text.
        With ``stream`` the text is written there as the tokens arrive (then a newline)."""
        check_int("index", index, minimum=0)
        _check_stream(stream)
        if stream is not None:
            stream.write(self.shown_prompt)
            stream.flush()
        return self.shown_prompt + self._generate(self.prompt_ids, self.config, self._context, index, stream)

    def chat_ids(self, text: str, history: Sequence[dict[str, str]] = ()) -> list[int]:
        """The prompt of the user turn ``text`` after the conversation ``history`` (user and assistant turns,
        oldest first; the options' ``system`` turn before them), as token ids."""
        return self.loaded.encode_prompt(self.loaded.format_chat(text, self.options.system, history))

    def reply(self, text: str, history: Sequence[dict[str, str]] = (), *, index: int = 0,
              stream: TextIO | None = None, log: Log | None = None) -> str:
        """The model's answer to the user turn ``text`` after the conversation ``history`` (see :meth:`chat_ids`),
        drawn with ``seed + index``: the text of the new tokens. With ``stream`` it is written there as the tokens
        arrive (then a newline). ``log``: where its note goes (default: the Sampler's)."""
        check_int("index", index, minimum=0)
        _check_stream(stream)
        ids = self.chat_ids(text, history)
        log = self._log if log is None else default_log(log)
        cfg = _window_config(self._gen_cfg, self.model, len(ids), self.options.max_new_tokens, log)
        return self._generate(ids, cfg, [], index, stream)

    def _generate(self, ids: list[int], config: Any, context: list[int], index: int, stream: TextIO | None) -> str:
        """The text of the tokens generated after ``ids`` (as it continues ``context``), seeded ``seed + index``."""
        import torch

        from attnkit.data.tokenizers.tokenizer import decode_after
        from attnkit.generation import TextStreamer, generate

        seed = self.options.seed
        cfg = config if seed is None else dataclasses.replace(config, seed=seed + index)
        streamer = None
        if stream is not None:
            streamer = TextStreamer(self.tokenizer, skip_special_tokens=True, file=stream, context=context)
        with torch.inference_mode():
            out = generate(self.model, [ids], cfg, tokenizer=self.tokenizer, streamer=streamer)
        return decode_after(self.tokenizer, context, out[0], skip_special_tokens=True)


def _check_stream(stream: Any) -> None:
    """``ValueError`` unless ``stream`` is None or a text stream (has ``write``, as ``sys.stdout`` or an open file)."""
    if stream is not None and not callable(getattr(stream, "write", None)):
        raise ValueError(f"stream must be a text stream with a write method (sys.stdout, an open file) or None, got "
                         f"{stream!r:.60} ({type(stream).__name__})")


def sample(options: SampleOptions | None = None, *, stream: TextIO | None = None, log: Log | None = None,
           **kwargs: Any) -> list[str]:
    """Draw ``num_samples`` samples (each the prompt followed by its continuation); with ``stream`` each is also
    written there as it is generated."""
    _check_stream(stream)  # before the model is loaded
    sampler = Sampler(options, log=log, **kwargs)
    return [sampler.sample(i, stream=stream) for i in range(sampler.options.num_samples)]
