"""A save that replaces a checkpoint folder and dies half-way (between the old folder moved aside and the new one
renamed into place) loses nothing: the old checkpoint is still on disk and a resume's ``clean_stale`` puts it back."""

from __future__ import annotations

import os

import pytest
import torch

from attnkit.checkpoints.checkpoint import clean_stale, load_checkpoint, save_checkpoint


def test_a_save_that_dies_before_publishing_the_new_folder_keeps_the_old_checkpoint(tmp_path, tiny_lm, monkeypatch):
    old_model = tiny_lm(0)
    save_checkpoint(tmp_path / "best", old_model, state={"step": 7})
    new_model = tiny_lm(1)

    real_rename = os.rename

    def dies_publishing(src, dst):  # the process "dies" as the finished copy is renamed into place
        if str(src).endswith("best.tmp"):
            raise OSError("simulated crash")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", dies_publishing)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "best", new_model, state={"step": 9})
    monkeypatch.setattr(os, "rename", real_rename)

    clean_stale(tmp_path)  # what a resume does first
    restored = tiny_lm(2)
    assert load_checkpoint(tmp_path / "best", restored)["step"] == 7
    for p, q in zip(restored.parameters(), old_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_a_save_whose_publishing_fails_puts_the_old_checkpoint_back_at_once(tmp_path, tiny_lm, monkeypatch):
    """An error (a full disk, not a crash) between moving ``best/`` aside and renaming the new copy into place left
    only ``best.old`` and ``best.tmp``: until a resume, ``sample --ckpt run`` silently fell back to another
    checkpoint. The old ``best/`` is now back under its name and the unfinished copy is gone."""
    old_model = tiny_lm(0)
    save_checkpoint(tmp_path / "best", old_model, state={"step": 7})
    real_rename = os.rename

    def fails_publishing(src, dst):
        if str(src).endswith("best.tmp"):
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", fails_publishing)
    with pytest.raises(OSError, match=r"cannot write the checkpoint .*best: \[Errno 28\] No space left on device"):
        save_checkpoint(tmp_path / "best", tiny_lm(1), state={"step": 9})
    monkeypatch.setattr(os, "rename", real_rename)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    restored = tiny_lm(2)
    assert load_checkpoint(tmp_path / "best", restored)["step"] == 7
    for p, q in zip(restored.parameters(), old_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
