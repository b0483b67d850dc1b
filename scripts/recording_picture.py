"""Draw one frame of an `infer --mcap` file from the file's own messages, as a viewer would show them: the
CompressedImage with the ImageMarker's LINE_LIST drawn over it in its colours (what Foxglove's Image panel overlays),
and beside it a bird's-eye view of the MarkerArray in base_link (what its 3D panel draws). Decoded with `mcap` +
`mcap-ros2-support`, not with edge_deploy, so the picture shows what any ROS 2 tool reads from the file.

    python scripts/recording_picture.py OUT.mcap [--frame N] [--out docs/recordings_frame.png] [--width 1100]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import cv2
import numpy as np

IMAGE, LANES, MARKERS = "/edge_deploy/image/compressed", "/edge_deploy/lanes", "/edge_deploy/markers"
PANEL_M = (60.0, 6.0, 24.0)  # the bird's-eye view: metres ahead of base_link, behind it, across


def frame_messages(path: Path, index: int) -> dict[str, Any]:
    """The decoded messages of the index-th frame (by log time), by topic."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        times = sorted({m.log_time for _, _, m in reader.iter_messages(topics=[IMAGE])})
        if not times:
            raise SystemExit(f"{path} has no {IMAGE} messages: is it an `edge-deploy infer --mcap` file?")
        when = times[min(index, len(times) - 1)]
        return {c.topic: d for _, c, m, d in reader.iter_decoded_messages() if m.log_time == when}


def overlay(messages: dict[str, Any]) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(bytes(messages[IMAGE].data), np.uint8), cv2.IMREAD_COLOR)
    marker = messages.get(LANES)
    if marker is not None:
        width = max(1, int(round(marker.scale)))
        for i in range(0, len(marker.points) - 1, 2):
            a, b, c = marker.points[i], marker.points[i + 1], marker.outline_colors[i]
            bgr = tuple(int(255 * v) for v in (c.b, c.g, c.r))
            cv2.line(image, (int(round(a.x)), int(round(a.y))), (int(round(b.x)), int(round(b.y))), bgr, width,
                     cv2.LINE_AA)
    return image


def birdseye(messages: dict[str, Any], height: int) -> np.ndarray:
    ahead, behind, across = PANEL_M
    scale = height / (ahead + behind)
    width = int(across * scale)
    panel = np.full((height, width, 3), 40, np.uint8)

    def pixel(x: float, y: float) -> tuple[int, int]:
        return int(round(width / 2 - y * scale)), int(round(height - (x + behind) * scale))

    for metres in range(10, int(ahead), 10):
        cv2.line(panel, pixel(metres, -across), pixel(metres, across), (70, 70, 70), 1)
        cv2.putText(panel, f"{metres} m", (4, pixel(metres, 0)[1] - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.35,
                    (140, 140, 140), 1, cv2.LINE_AA)
    array = messages.get(MARKERS)
    for marker in array.markers if array is not None else []:
        if marker.action != 0 or len(marker.points) < 2:
            continue
        pts = np.array([pixel(p.x, p.y) for p in marker.points], np.int32)
        bgr = tuple(int(255 * v) for v in (marker.color.b, marker.color.g, marker.color.r))
        cv2.polylines(panel, [pts], False, bgr, max(1, int(round(marker.scale.x * scale))), cv2.LINE_AA)
    car = np.array([pixel(0, 0.9), pixel(0, -0.9), pixel(-4, -0.9), pixel(-4, 0.9)], np.int32)
    cv2.fillPoly(panel, [car], (200, 200, 200))  # base_link at the front of a 4 m car
    cv2.putText(panel, "base_link", (pixel(0, 0)[0] + 12, pixel(0, 0)[1]), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (200, 200, 200), 1, cv2.LINE_AA)
    return panel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mcap", type=Path)
    parser.add_argument("--frame", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("docs/recordings_frame.png"))
    parser.add_argument("--width", type=int, default=1100, help="the picture's width (pixels)")
    args = parser.parse_args()
    messages = frame_messages(args.mcap, args.frame)
    picture = overlay(messages)
    if MARKERS in messages:
        picture = np.hstack([picture, birdseye(messages, picture.shape[0])])
    height = round(picture.shape[0] * args.width / picture.shape[1])
    cv2.imwrite(str(args.out), cv2.resize(picture, (args.width, height), interpolation=cv2.INTER_AREA))
    print(f"{args.out}: frame {args.frame} of {args.mcap} ({', '.join(sorted(messages))})")


if __name__ == "__main__":
    main()
