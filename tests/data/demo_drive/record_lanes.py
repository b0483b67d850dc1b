"""Record the demo model's lanes on frames 70-89 of the demo's drive into lanes_70_89.json (issue 45, item 11).

The frames are those `scripts/demo.sh` gives `infer --camera`: `edge-deploy sample --video --count 90` written to
an MP4 and read back. The model is the demo weights converted as bench_evaluate.py does (ONNX, top-k 6), run in
ONNX Runtime with the client's own preprocessing and decoding (edge_deploy.evaluate.runners.OnnxRunner). In frames
83 and 85-88 the model misses the ego lane's left line (the dashed centre line): the ego lane is then the two lanes
from the right line to the next left one, 5.1-5.9 m wide (5.56 m in frame 85).

    PYTHONPATH=$PWD python tests/data/demo_drive/record_lanes.py [--artifact DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIRST, LAST = 70, 89


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", type=Path, help="the demo weights already converted (else converted here)")
    args = parser.parse_args()
    from edge_deploy.evaluate.runners import OnnxRunner
    from edge_deploy.geometry.calibration_file import read_calibration
    from edge_deploy.media.video import frames_of, open_video

    with tempfile.TemporaryDirectory(prefix="record-demo-drive-") as tmp:
        work = Path(tmp)
        artifact = args.artifact
        if artifact is None:
            artifact = work / "artifact"
            subprocess.run([sys.executable, "-m", "edge_deploy", "convert", "laneatt", "--checkpoint",
                            str(ROOT / "weights" / "laneatt_r18_synthetic.pt"), "--backbone", "resnet18",
                            "--dataset", "culane", "--top-k", "6", "--output", str(artifact), "--target", "onnx",
                            "--precision", "fp32"], check=True, cwd=ROOT)
        subprocess.run([sys.executable, "-m", "edge_deploy", "sample", "--out", str(work / "samples"), "--video",
                        "--count", str(LAST + 1)], check=True, cwd=ROOT)
        runner = OnnxRunner(artifact)
        capture = open_video(str(work / "samples" / "drive.mp4"))
        frames = {}
        for index, frame in enumerate(frames_of(capture, LAST + 1)):
            if index >= FIRST:
                frames[str(index)] = [{"score": round(float(lane.score), 4),
                                       "points": [[round(float(u), 2), round(float(v), 2)] for u, v in lane.points]}
                                      for lane in runner.detect(frame)]
        capture.release()
        calibration = read_calibration(work / "samples" / "drive.calib.yaml")[0]
    out = Path(__file__).with_name(f"lanes_{FIRST}_{LAST}.json")
    out.write_text(json.dumps({"drive": "edge-deploy sample --video --count 90 (drive.mp4, 30 frames/s)",
                               "model": "weights/laneatt_r18_synthetic.pt, ONNX FP32, ONNX Runtime",
                               "calibration": calibration, "frames": frames}) + "\n")
    print(out)


if __name__ == "__main__":
    main()
