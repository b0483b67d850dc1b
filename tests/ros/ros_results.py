"""FrameResults for the ros tests without a server: a synthetic road (edge_deploy.synthetic.roads), its true
lanes as the detected ones, its camera, its markers fitted by the real LaneGeometry."""
from __future__ import annotations

from edge_deploy.geometry import Camera, LaneGeometry
from edge_deploy.lanedet.lane import Lane
from edge_deploy.media.stamped import CameraSetup, FrameResult, StampedFrame
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene, scene_truth

T0_NS = 1_700_000_000_000_000_000


def road_results(count: int, width: int = 328, height: int = 120, camera: bool = True) -> list[FrameResult]:
    truth = scene_truth(EVAL_SEED_BASE, width, height)
    cam = Camera.from_mapping(truth.camera)
    geometry = LaneGeometry(cam)
    results = []
    for i in range(count):
        road = scene(EVAL_SEED_BASE, width, height)
        lanes = [Lane(points, 0.5 + 0.1 * k) for k, points in enumerate(road.lanes)]
        frame = StampedFrame(road.frame, T0_NS + i * 50_000_000, "cam_optical", i)
        results.append(FrameResult(frame, lanes, geometry.frame_markers(lanes, road.frame) if camera else None,
                                   CameraSetup(cam, "cam_optical", (1.5, 0.0)) if camera else None))
    return results
