#!/usr/bin/env bash
# Creates .venv on first use (or when pyproject.toml changed) and installs attnkit into it.
# torch is installed first and pinned to the local CPU build, so no dependency can pull another build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
STAMP="$VENV/.attnkit-setup"
HASH="$(sha256sum < "$ROOT/pyproject.toml" | cut -c1-16)"
WANT="$HASH-${1:-main}"
# The test set-up is a superset of the main one, so either stamp satisfies `main`.
if [ -f "$STAMP" ] && { grep -qx -- "$WANT" "$STAMP" || { [ "${1:-main}" = main ] && grep -qx -- "$HASH-test" "$STAMP"; }; }; then
    exit 0
fi
echo "[setup] preparing $VENV (first use or pyproject.toml changed) ..." >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" >&2
EXTRA=""
[ "${1:-main}" = "test" ] && EXTRA="[test]"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" -e "$ROOT$EXTRA" >&2
"$VENV/bin/python" - <<'PYEOF' >&2
import torch
assert torch.__version__.startswith("2.13.0"), f"expected torch 2.13.0 (CPU build), got {torch.__version__}"
PYEOF
if "$VENV/bin/python" -m pip list 2>/dev/null | grep -qi '^nvidia-'; then
    echo "[setup] error: a CUDA build of torch or NVIDIA packages got installed; remove .venv and retry" >&2
    exit 1
fi
echo "$WANT" > "$STAMP"
echo "[setup] done" >&2
