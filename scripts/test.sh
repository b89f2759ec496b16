#!/usr/bin/env bash
# Sets up .venv (with the test extra) on first use, then runs the whole test suite.
# The attention page's browser tests drive Debian's chromium + chromium-driver (apt-get install chromium
# chromium-driver; .ci/run installs them where it can); where they are not installed those tests are skipped with that
# reason, the rest runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" test
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"
