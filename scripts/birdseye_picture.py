"""Draw docs/geometry_birdseye.png: a held-out synthetic frame with MODEL's lanes, and beside it the bird's-eye
panel of their markers in metres (the frame's own camera from the generator's truth).

    python scripts/birdseye_picture.py ARTIFACT [--frame 7] [--out docs/geometry_birdseye.png] [--width 960]

ARTIFACT: the demo's artifact (`scripts/demo.sh` converts the demo weights into out/demo/lanedet), run in ONNX
Runtime, or grpc://HOST:PORT/NAME. --frame: which of the evaluation frames (`evaluate --synthetic`'s order).
"""
from __future__ import annotations

import argparse
from itertools import islice
from pathlib import Path

import cv2

from edge_deploy.evaluate.datasets import synthetic_frames
from edge_deploy.evaluate.runners import open_runner
from edge_deploy.geometry.birdseye import annotated_frame
from edge_deploy.geometry.camera import Camera
from edge_deploy.geometry.frame_markers import LaneGeometry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an artifact directory or grpc://HOST:PORT/NAME")
    parser.add_argument("--frame", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("docs/geometry_birdseye.png"))
    parser.add_argument("--width", type=int, default=960, help="the picture's width in pixels (the page's)")
    args = parser.parse_args()
    name, frame, _, _, truth = next(islice(synthetic_frames(args.frame + 1, marker_truth=True), args.frame, None))
    runner = open_runner(args.model, None)
    try:
        lanes = runner.detect(frame)
    finally:
        runner.close()
    found = LaneGeometry(Camera.from_mapping(truth.camera)).frame_markers(lanes, frame)
    picture = annotated_frame(frame, lanes, f"{Path(args.model).name}: {len(lanes)} lanes", found)
    height = round(picture.shape[0] * args.width / picture.shape[1])
    picture = cv2.resize(picture, (args.width, height), interpolation=cv2.INTER_AREA)
    if not cv2.imwrite(str(args.out), picture):
        raise SystemExit(f"cannot write {args.out}")
    print(f"{args.out}: {name}, {len(lanes)} lanes, {len(found.markers)} markers")


if __name__ == "__main__":
    main()
