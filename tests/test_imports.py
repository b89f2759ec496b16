"""What must import without torch: configs, presets, the argument checks and the command line's parser
(``attnkit --help`` and a config's validation stay fast; torch loads only when a model is built)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("code", [
    "import attnkit.models.configs, attnkit.models.presets, attnkit.checks, attnkit.recipes",
    "from attnkit.models import GPTConfig, get_preset; get_preset('gpt2')",
    "from attnkit.cli.main import build_parser; build_parser()",
])
def test_imports_without_torch(code):
    check = f"import sys; {code}; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", check], check=True)


def test_lazy_models_package_gives_the_same_objects():
    import attnkit.models as models
    from attnkit.models.gpt import GPT
    from attnkit.models.params import __all__ as params_names

    assert models.GPT is GPT and models.gpt.GPT is GPT
    assert set(params_names) <= set(models.__all__) and set(models.__all__) <= set(dir(models))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        models.Nope  # noqa: B018
