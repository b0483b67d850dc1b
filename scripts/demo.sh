#!/usr/bin/env bash
# The whole job on the built-in defaults: convert LaneATT, install it, serve it,
# detect lanes on a synthetic road frame and a synthetic drive, and write the pictures.
# The built-in LaneATT (ResNet-18, CULane top-1000 anchors) gets the demo weights in
# weights/ (trained on synthetic roads only: see weights/README.md).
#   CHECKPOINT=laneatt_r34_culane.pt BACKBONE=resnet34 bash scripts/demo.sh   # an official checkpoint
#   OUT=dir PORT=8001 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ED=".venv/bin/edge-deploy"
OUT=${OUT:-out/demo}
PORT=${PORT:-8001}
# The demo weights' synthetic roads have up to 6 lane markings: decode up to 6 lanes. An official
# checkpoint keeps its data set's default (CULane: 4).
TOP_K=$([ -z "${CHECKPOINT:-}" ] && echo "--top-k 6" || true)
CHECKPOINT=${CHECKPOINT:-weights/laneatt_r18_synthetic.pt}
BACKBONE=${BACKBONE:-resnet18}

"$ED" convert laneatt --checkpoint "$CHECKPOINT" --backbone "$BACKBONE" --dataset culane $TOP_K \
    --output "$OUT/lanedet" --eval-data synthetic:20 --force
"$ED" install "$OUT/lanedet" --repository "$OUT/model_repository" --name lanedet --pipeline

# No systemd manager is assumed here: serve in the foreground (use `edge-deploy serve`
# or `serve --user` on a machine with systemd). Stopped when this script exits.
"$ED" serve --foreground --repository "$OUT/model_repository" --grpc-port "$PORT" >"$OUT/tritonserver.log" 2>&1 &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
"$ED" health --wait 180 --url "127.0.0.1:$PORT" --model lanedet --model lanedet_pipeline

"$ED" sample --out "$OUT/samples" --count 1
"$ED" sample --out "$OUT/samples" --video --count 90
"$ED" infer "$OUT"/samples/*.png "$OUT/samples/drive.mp4" --url "127.0.0.1:$PORT" --model lanedet \
    --out "$OUT/lanes" --json
# One held-out synthetic frame scored against its ground truth (truth green, lanes red, F1 in the caption).
"$ED" evaluate --url "127.0.0.1:$PORT" --model lanedet --synthetic 1 --show 1 --out "$OUT/evaluate"
echo "demo: lanes drawn in $OUT/lanes/ (road-000.lanes.png, drive.lanes.mp4), scored against the truth in" \
     "$OUT/evaluate/worst_frames.png; server log in $OUT/tritonserver.log"
