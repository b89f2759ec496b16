#!/usr/bin/env bash
# Sets up .venv (with the test extra) on first use, then runs the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" test
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"
