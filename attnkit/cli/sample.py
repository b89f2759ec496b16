"""``attnkit sample``: generate text from a trained checkpoint (``--ckpt``) or a pretrained model (``--model``).

The sampling is :class:`attnkit.api.Sampler` (``--interactive``: a conversation, :func:`attnkit.api.chat`); each
sample streams to stdout as its tokens arrive (``--no-stream``: printed when complete).
"""

from __future__ import annotations

import argparse
import sys

from attnkit.cli.flags import add_device_flags, add_model_source, add_sampling_flags, options_from


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate text from a checkpoint or a pretrained model",
                       description="Generate text with attnkit's generation API (KV cache, greedy or sampled), "
                                   "streaming tokens to stdout as they arrive.")
    add_model_source(p)
    p.add_argument("--prompt", default="", help="text to continue (default: empty, start from BOS or newline)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template (pretrained models)")
    p.add_argument("--system", default=None, help="with --chat: the system turn (default: the template's own, if any)")
    p.add_argument("--interactive", action="store_true", help="a chat: a user turn a line from stdin (/clear, /exit)")
    add_sampling_flags(p)
    add_device_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnkit.api import SampleOptions, Sampler, chat

    options = options_from(SampleOptions, args, use_cache=not args.no_cache, chat=args.chat or args.interactive)
    if args.interactive:  # (the answers stream; --no-stream has nothing to hold back)
        chat(options)
        return 0
    sampler = Sampler(options)  # bad sampling options fail before the model is loaded
    for i in range(options.num_samples):
        if options.num_samples > 1:
            print(f"--- sample {i + 1} ---")
        text = sampler.sample(i, stream=None if args.no_stream else sys.stdout)
        if args.no_stream:
            print(text)
    return 0
