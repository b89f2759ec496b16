"""Hand-edited configs, fuzzed (hypothesis): every field of TrainConfig, GPTConfig and TransformerConfig set to
values of any JSON type must give a valid config that round-trips through JSON, or one ValueError naming the
problem, never another exception (a TypeError or AttributeError would be a traceback in the CLI).
"""

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.models.configs import GPTConfig, TransformerConfig
from attnkit.training.config import TrainConfig

json_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2),
                        st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
BASES = {
    TrainConfig: TrainConfig().to_dict(),
    GPTConfig: dict(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=16),
    TransformerConfig: TransformerConfig(src_vocab_size=32, tgt_vocab_size=32, d_model=16, num_heads=2,
                                         num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32).to_dict(),
}


def _edits(cls):
    names = [f.name for f in dataclasses.fields(cls)]
    return st.dictionaries(st.sampled_from(names), json_values, min_size=1, max_size=3)


def _check(cls, edits):
    data = json.loads(json.dumps(BASES[cls] | edits))  # what a hand-edited state.json reads back as
    try:
        cfg = cls.from_dict(data)
    except ValueError:
        return
    assert cls.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@settings(max_examples=120, deadline=None, derandomize=True)
@given(_edits(TrainConfig))
def test_train_config_edits(edits):
    _check(TrainConfig, edits)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(_edits(GPTConfig))
def test_gpt_config_edits(edits):
    _check(GPTConfig, edits)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(_edits(TransformerConfig))
def test_transformer_config_edits(edits):
    _check(TransformerConfig, edits)
