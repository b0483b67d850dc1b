#!/usr/bin/env bash
# The whole job on the built-in defaults: convert LaneATT, install it, serve it,
# detect lanes on a synthetic road frame and write the picture.
#   CHECKPOINT=path/to/laneatt_r34_culane.pt bash scripts/demo.sh   # with trained weights
#   OUT=dir PORT=8001 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ED=".venv/bin/edge-deploy"
OUT=${OUT:-out/demo}
PORT=${PORT:-8001}
ckpt=()
[ -n "${CHECKPOINT:-}" ] && ckpt=(--checkpoint "$CHECKPOINT")

"$ED" convert laneatt "${ckpt[@]}" --output "$OUT/lanedet" --force
"$ED" install "$OUT/lanedet" --repository "$OUT/model_repository" --name lanedet --pipeline

# No systemd manager is assumed here: serve in the foreground (use `edge-deploy serve`
# or `serve --user` on a machine with systemd). Stopped when this script exits.
"$ED" serve --foreground --repository "$OUT/model_repository" --grpc-port "$PORT" >"$OUT/tritonserver.log" 2>&1 &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
"$ED" health --wait 180 --url "127.0.0.1:$PORT" --model lanedet --model lanedet_pipeline

"$ED" sample --out "$OUT/samples" --count 1
"$ED" infer "$OUT"/samples/*.png --url "127.0.0.1:$PORT" --model lanedet --out "$OUT/lanes" --json
echo "demo: lanes drawn in $OUT/lanes/; server log in $OUT/tritonserver.log"
[ -n "${CHECKPOINT:-}" ] || echo "demo: the built-in LaneATT has untrained weights and finds no real lanes; set CHECKPOINT=... for a trained one"
