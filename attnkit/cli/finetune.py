"""``attnkit finetune``: continue training a pretrained decoder on your text, fully or with LoRA adapters: the flags
of :func:`attnkit.api.finetune` (whose docstring says how it differs from ``train lm``).

    attnkit finetune --from smollm2-135m-instruct --data fortunes --lora --max-time 20 --out runs/ft
"""

from __future__ import annotations

import argparse

from attnkit.api import FinetuneOptions, finetune
from attnkit.cli.flags import add_run_flags, runs
from attnkit.data.pipeline.documents import DOCUMENT_MODES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune", help="fine-tune a pretrained decoder (full or LoRA) on a text corpus",
        description="Fine-tune a pretrained GPT/Llama-style model on text with attnkit's training loop. The model's "
                    "own tokenizer encodes the data; documents (fortune entries, blank-line paragraphs) end with its "
                    "end-of-sequence token. With --lora only low-rank adapters train, merged into the best "
                    "checkpoint's weights at the end. Sample the result with `attnkit sample --ckpt OUT`.")
    p.add_argument("--from", dest="source", default=None, metavar="MODEL",
                   help="smollm2-135m-instruct, a .gguf file, an attnkit run/checkpoint folder, or a Hugging Face "
                        "folder (config.json + model.safetensors); not needed with --resume")
    p.add_argument("--data", default=None, help="recipe name (fortunes, shakespeare) or a UTF-8 text file/folder")
    p.add_argument("--documents", choices=DOCUMENT_MODES, default=None,
                   help="how the text splits into documents, each followed by the EOS token: fortune ('%%' lines), "
                        "blank-line (paragraphs), none (one stream); auto (default) = fortune if the train text has "
                        "lines holding only '%%', else none")
    p.add_argument("--tokenizer", default=None, metavar="FILE",
                   help="tokenizer of a Hugging Face folder without one: an attnkit or a Hugging Face tokenizer.json")
    p.add_argument("--block-size", dest="block_size", type=int, default=None, help="context length T (default 256)")
    lo = p.add_argument_group("LoRA")
    lo.add_argument("--lora", action="store_true", help="train low-rank adapters instead of all weights")
    lo.add_argument("--lora-rank", type=int, help="adapter rank r (default 8; at most an adapted layer's smaller side)")
    lo.add_argument("--lora-alpha", type=float, default=None, help="adapter scale (update alpha/r * B A; default 16)")
    lo.add_argument("--lora-dropout", type=float, default=None, help="dropout on the adapter input (default 0)")
    lo.add_argument("--lora-targets", nargs="+", default=None, metavar="NAME",
                    help="Linear layers to adapt by name (default qkv_proj out_proj; also w_in w_gate w_out)")
    add_run_flags(p)
    p.set_defaults(func=runs(finetune, FinetuneOptions))
