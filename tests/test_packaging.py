"""attnkit as a user gets it from ``pip install .``: the wheel built from a copy of the source (never inside the
checkout, which would leave build/ and *.egg-info there) holds every file of the package and nothing else, its
metadata is right, and the package runs from the wheel's files alone, outside the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from email import message_from_string
from email.message import Message
from pathlib import Path

import pytest

import attnkit

ROOT = Path(__file__).resolve().parents[1]

# The lowest version of each dependency that attnkit runs with (pyproject.toml's bounds must not admit less), and why.
FLOORS = {
    "torch": ((2, 6), "torch.load(weights_only=True) is a safe unpickler"),
    "tokenizers": ((0, 20), "Tokenizer.encode_batch_fast"),
    "gguf": ((0, 17, 1), "earlier versions cannot be imported without sentencepiece"),
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    build_meta = pytest.importorskip("setuptools.build_meta")  # noqa: F841 - the backend must be importable
    import setuptools
    import tomllib

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    needed = next((_version(r) for r in requires if r.startswith("setuptools")), ())
    if _version(setuptools.__version__) < needed:
        pytest.skip(f"setuptools {setuptools.__version__} is older than the build needs ({requires})")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "attnkit", src / "attnkit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "-q", "-w", str(dist), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (found,) = dist.glob("attnkit-*.whl")
    return found


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as z:
        return message_from_string(z.read(f"attnkit-{attnkit.__version__}.dist-info/METADATA").decode())


def test_wheel_holds_every_package_file_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "attnkit").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert package - names == set(), "files of the package (read at run time) missing from the wheel"
    dist_info = f"attnkit-{attnkit.__version__}.dist-info/"
    assert {n for n in names if not n.startswith(("attnkit/", dist_info))} == set()
    assert f"{dist_info}licenses/LICENSE" in names  # the MIT text the License-Expression names
    assert not {n for n in names if n.startswith("attnkit/")} - package


def test_wheel_metadata(wheel):
    meta = _metadata(wheel)
    assert meta["Name"] == "attnkit" and meta["Version"] == attnkit.__version__
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "MIT"
    assert {"test", "bench"} <= set(meta.get_all("Provides-Extra"))
    runtime = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    for name, (floor, why) in FLOORS.items():
        (req,) = [r for r in runtime if re.match(rf"{name}\b", r)]
        low = re.search(r">=\s*([\d.]+)", req)
        assert low and _version(low.group(1)) >= floor, f"{req}: attnkit needs {name} {floor} ({why})"
    assert any(re.fullmatch(r"torch\s*(<2\.14,\s*>=2\.6|>=2\.6,\s*<2\.14)", r) for r in runtime), runtime
    with zipfile.ZipFile(wheel) as z:
        entry_points = z.read(f"attnkit-{attnkit.__version__}.dist-info/entry_points.txt").decode()
    assert re.search(r"^\[console_scripts\]\s*^attnkit = attnkit\.cli\.main:main$", entry_points, re.M)


def test_the_wheels_files_run_outside_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    run = tmp_path / "run"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # ahead of the checkout's editable install
    code = ("import attnkit, attnkit.api, attnkit.cli.main as m; from pathlib import Path; "
            f"assert Path(attnkit.__file__).is_relative_to({str(site)!r}), attnkit.__file__; m.main(['--version'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=run, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"attnkit {attnkit.__version__}"
    proc = subprocess.run([sys.executable, "-m", "attnkit", "params", "char-small"], cwd=run, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "total    1,082,496" in proc.stdout
