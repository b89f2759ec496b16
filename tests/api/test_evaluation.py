"""``attnkit.api.evaluate_mt``: the translations and the record it writes (the scores themselves are checked end to
end in tests/cli/test_mt_end_to_end.py and tests/api/test_api.py).

Axis legend: none (runs and files only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit import api

TINY_MT = dict(preset="transformer-cpu", overrides={"d_model": 32, "num_heads": 2, "dim_feedforward": 64,
                                                    "num_encoder_layers": 1, "num_decoder_layers": 1},
               vocab_size=300, max_tokens=256, eval_every=10, eval_batches=2, ckpt_every=5, log_every=5,
               bleu_sentences=8, progress=False)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, make_copy_task) -> Path:
    return make_copy_task(tmp_path_factory.mktemp("pairs") / "copy", sizes=(("train", 300), ("valid", 10),
                                                                             ("test", 10)))


@pytest.fixture(scope="module")
def mt_run(pairs, tmp_path_factory) -> api.RunResult:
    return api.train_mt(data=str(pairs), out=tmp_path_factory.mktemp("mt") / "run", steps=5, log=lambda s: None,
                        **TINY_MT)


def test_hyps_in_a_new_folder_are_written_before_the_record_that_names_them(mt_run, pairs, tmp_path):
    # the record was written first and then the translations failed on the missing folder: a record naming a file
    # that does not exist, and the translating lost
    hyps = tmp_path / "new" / "folder" / "hyps.txt"
    result = api.evaluate_mt(ckpt=mt_run.out, data=str(pairs), split="test", beam=1, hyps=hyps,
                             json=tmp_path / "record.json")
    assert len(hyps.read_text(encoding="utf-8").splitlines()) == 10
    assert json.loads(result.path.read_text(encoding="utf-8"))["hyps"] == str(hyps.resolve())
