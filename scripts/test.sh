#!/usr/bin/env bash
# Sets up .venv (with the test extra) on first use, then runs the whole test suite.
# The attention page's browser tests drive Debian's chromium + chromium-driver (apt-get install chromium
# chromium-driver; .ci/run installs them where it can); where they are not installed those tests are skipped with that
# reason, the rest runs.
# The tests run in parallel, one pytest-xdist worker a core (at most 8; ATTNKIT_TEST_WORKERS=N to choose, 0 = in this
# process), a test file to a worker: each test runs torch on one thread, so the cores would otherwise idle. The
# slowest tests are listed at the end. Arguments go to pytest after these (a later -n wins).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" test
cd "$ROOT"
WORKERS="${ATTNKIT_TEST_WORKERS:-$(nproc)}"
[ "$WORKERS" -le 8 ] || WORKERS=8
exec "$ROOT/.venv/bin/python" -m pytest -n "$WORKERS" --dist loadfile --durations=20 "$@"
