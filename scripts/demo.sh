#!/usr/bin/env bash
# The whole job on the built-in defaults: convert LaneATT, install it, serve it,
# detect lanes on a synthetic road frame and a synthetic drive, and write the pictures.
# The built-in LaneATT (ResNet-18, CULane top-1000 anchors) gets the demo weights in
# weights/ (trained on synthetic roads only: see weights/README.md).
#   CHECKPOINT=laneatt_r34_culane.pt BACKBONE=resnet34 bash scripts/demo.sh   # an official checkpoint
#   FAMILY=ufldv2 [DATASET=tusimple] [CHECKPOINT=culane_res18.pth] bash scripts/demo.sh   # another family
#   OUT=dir PORT=8001 bash scripts/demo.sh   # without PORT: 8001, or a free port when 8001 is taken
# FAMILY is any lane-model family `edge-deploy convert --help` lists (laneatt, ufldv2, clrnet, or one from
# an installed package). Only LaneATT has demo weights: another family without CHECKPOINT runs on seeded
# random weights, and the served model is named FAMILY_random_weights so that every picture's caption says so.
set -euo pipefail
cd "$(dirname "$0")/.."
stop() { echo "demo: stopped: $*" >&2; exit 1; }
trap 'code=$?; echo "demo: stopped: \`$BASH_COMMAND\` failed (exit $code, scripts/demo.sh line $LINENO)" >&2' ERR
OUT=${OUT:-out/demo}

# The demo's server must be the one that answers: a port another server holds is refused before anything runs.
port_free() { python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }
if [ -z "${PORT:-}" ]; then
    PORT=8001
    if ! port_free "$PORT"; then
        PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        echo "demo: 127.0.0.1:8001 is in use (another server?): serving on 127.0.0.1:$PORT instead"
    fi
elif ! port_free "$PORT"; then
    stop "PORT=$PORT: 127.0.0.1:$PORT is already in use (another server?); give a free PORT, or none to let the demo choose one"
fi

bash scripts/setup.sh
ED=".venv/bin/edge-deploy"
FAMILY=${FAMILY:-laneatt}
BACKBONE=${BACKBONE:-resnet18}
if [ "$FAMILY" = laneatt ] && [ -z "${CHECKPOINT:-}" ]; then
    # The demo weights' synthetic roads have up to 6 lane markings: decode up to 6 lanes, and score them.
    NAME=lanedet
    "$ED" convert laneatt --checkpoint weights/laneatt_r18_synthetic.pt --backbone "$BACKBONE" \
        --dataset culane --top-k 6 --output "$OUT/$NAME" --eval-data synthetic:20 --force
else
    # An official checkpoint keeps its data set's defaults (CULane: 4 lanes).
    NAME=$([ "$FAMILY" = laneatt ] && echo lanedet || { [ -n "${CHECKPOINT:-}" ] && echo "$FAMILY"; } \
        || echo "${FAMILY}_random_weights")
    "$ED" convert "$FAMILY" ${CHECKPOINT:+--checkpoint "$CHECKPOINT"} --backbone "$BACKBONE" \
        --dataset "${DATASET:-culane}" --output "$OUT/$NAME" --force
fi
"$ED" install "$OUT/$NAME" --repository "$OUT/model_repository" --name "$NAME" --pipeline

# No systemd manager is assumed here: serve in the foreground (use `edge-deploy serve`
# or `serve --user` on a machine with systemd). Stopped when this script exits.
"$ED" serve --foreground --repository "$OUT/model_repository" --grpc-port "$PORT" --wait 180 \
    --log-file "$OUT/tritonserver.log" >"$OUT/serve.out" 2>"$OUT/serve.err" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
# Ready when the demo's own server says so; if it stops first (a port taken meanwhile, a model that does not load),
# the demo stops with its reason instead of asking whatever else answers on the port.
until grep -q "^tritonserver serving .* at 127.0.0.1:$PORT " "$OUT/serve.out"; do
    kill -0 "$server" 2>/dev/null || stop "its server did not start: $(grep -h '^error:' "$OUT/serve.err" | tail -n 1 \
        || true) (log: $OUT/tritonserver.log)"
    sleep 0.5
done
# The server record of the demo's repository names its server: health asks that one, with its key.
"$ED" health --repository "$OUT/model_repository" --model "$NAME" --model "${NAME}_pipeline"

"$ED" sample --out "$OUT/samples" --count 1
"$ED" sample --out "$OUT/samples" --video --count 90
"$ED" infer "$OUT"/samples/*.png "$OUT/samples/drive.mp4" --url "127.0.0.1:$PORT" --model "$NAME" \
    --out "$OUT/lanes" --json
# Lanes in metres (docs/geometry.md): markers, figures and the bird's-eye panel, each with its calibration from sample.
"$ED" infer "$OUT/samples/road-000.png" --camera "$OUT/samples/road-000.calib.yaml" --speed 20 --url "127.0.0.1:$PORT" \
    --model "$NAME" --out "$OUT/markers" --json
"$ED" infer "$OUT/samples/drive.mp4" --camera "$OUT/samples/drive.calib.yaml" --track --speed 20 \
    --url "127.0.0.1:$PORT" --model "$NAME" --out "$OUT/markers"
echo "demo: lane markers and the bird's-eye panel in $OUT/markers/ (road-000.lanes.png/.json, drive.lanes.mp4/.jsonl)"
# One held-out synthetic frame scored against its ground truth (truth green, lanes red, F1 in the caption).
"$ED" evaluate --url "127.0.0.1:$PORT" --model "$NAME" --synthetic 1 --show 1 --out "$OUT/evaluate"
echo "demo: lanes drawn in $OUT/lanes/ (road-000.lanes.png, drive.lanes.mp4), scored against the truth in" \
     "$OUT/evaluate/worst_frames.png; server log in $OUT/tritonserver.log"
echo "demo: done. edge-deploy is installed in .venv, not on your PATH: run \`source .venv/bin/activate\` first" \
     "(then \`edge-deploy --help\`, \`edge-deploy doctor\`), or call .venv/bin/edge-deploy"
