"""attnkit.api: every run is a function. What the ``attnkit`` command does, from Python or a notebook.

Each function takes a validated options dataclass (or its fields as keyword arguments) and returns a result; it
has the command's defaults, resume rules, progress bar and errors (``ValueError`` / ``OSError`` with one clear
message). The command line (:mod:`attnkit.cli`) only turns flags into these options and prints the results.

========================================  =====================================  ================================
function                                  options                                command
========================================  =====================================  ================================
:func:`train_lm` -> :class:`RunResult`    :class:`TrainLMOptions`                ``attnkit train lm``
:func:`train_mt` -> :class:`RunResult`    :class:`TrainMTOptions`                ``attnkit train mt``
:func:`finetune` -> :class:`RunResult`    :class:`FinetuneOptions`               ``attnkit finetune``
:func:`evaluate_lm` -> :class:`EvalResult`  :class:`EvalLMOptions`               ``attnkit eval lm``
:func:`evaluate_mt` -> :class:`EvalResult`  :class:`EvalMTOptions`               ``attnkit eval mt``
:func:`translate`, :class:`Translator`    :class:`TranslateOptions`              ``attnkit translate``
:func:`translate_file`                    :class:`TranslateFileOptions`          ``attnkit translate --output``
:func:`sample`, :class:`Sampler`          :class:`SampleOptions`                 ``attnkit sample``
:func:`chat`                              :class:`SampleOptions`                 ``attnkit sample --interactive``
:func:`draw_attention` and the others     :class:`ModelText`                     ``attnkit viz ...``
:func:`trace_model`                       :class:`TracePreset`, :class:`ModelText`  ``attnkit trace``
:func:`prepare_data`, :func:`data_recipes`                                       ``attnkit data``
:func:`parameter_table`, :func:`convert_checkpoint`                              ``attnkit params``, ``convert``
========================================  =====================================  ================================

Quick start::

    from attnkit.api import train_lm, sample
    run = train_lm(data="shakespeare", preset="char-small", max_time=3, out="runs/char")
    print(run.summary["valid_loss"])
    print(sample(ckpt=run.out, prompt="ROMEO:", max_new_tokens=100, seed=1)[0])
    train_lm(out="runs/char", resume=True, max_time=6)       # continue exactly where it stopped

A run stopped by Ctrl-C or SIGTERM writes a checkpoint at its step and raises :class:`Interrupted` (a
``KeyboardInterrupt`` carrying the signal, the step, the checkpoint and the command that resumes it).

Importing this module imports no torch (the functions do, when called). There are no tensor axes in this file.
"""

from __future__ import annotations

from .chat import chat
from .data import PreparedData, data_recipes, prepare_data
from .decoding import DecodingOptions
from .evaluation import EvalLMOptions, EvalMTOptions, EvalResult, evaluate_lm, evaluate_mt
from .finetuning import FinetuneOptions, finetune
from .inputs import ModelText
from .lm_training import TrainLMOptions, train_lm
from .models import ConvertedCheckpoint, convert_checkpoint, parameter_table, preset_names
from .mt_training import TrainMTOptions, train_mt
from .options import DeviceOptions, RunResult, TrainOptions
from .sampling import SampleOptions, Sampler, sample
from .tracing import TracePreset, trace_model
from .translation import (TranslateFileOptions, TranslateFileResult, TranslateOptions, Translator, translate,
                          translate_file)
from .viz import draw_attention, draw_mask, draw_params, draw_positions, draw_predictions

__all__ = [
    "ConvertedCheckpoint", "DecodingOptions", "DeviceOptions", "EvalLMOptions", "EvalMTOptions", "EvalResult",
    "chat", "FinetuneOptions", "ModelText", "PreparedData", "RunResult", "SampleOptions", "Sampler", "TracePreset",
    "TrainLMOptions", "TrainMTOptions", "TrainOptions", "TranslateOptions", "Translator", "convert_checkpoint",
    "data_recipes", "draw_attention", "draw_mask", "draw_params", "draw_positions", "draw_predictions",
    "evaluate_lm", "evaluate_mt", "finetune", "parameter_table", "prepare_data", "preset_names", "sample",
    "trace_model", "train_lm", "train_mt", "translate", "translate_file", "TranslateFileOptions",
    "TranslateFileResult", "Interrupted",
]


def __getattr__(name: str):
    # Interrupted lives with the training loop (attnkit.training.preemption), whose package imports torch: loaded
    # on first use, so that `import attnkit.api` stays torch-free
    if name == "Interrupted":
        from attnkit.training.preemption import Interrupted

        return Interrupted
    raise AttributeError(f"module 'attnkit.api' has no attribute {name!r}")
