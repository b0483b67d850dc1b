"""One frame's results as ROS 2 messages (CDR bytes), on the channels docs/recordings.md lists:

/edge_deploy/image/compressed  sensor_msgs/msg/CompressedImage  the frame (JPEG)
/edge_deploy/camera_info       sensor_msgs/msg/CameraInfo       the camera (K all zero when it is not known)
/tf_static                     tf2_msgs/msg/TFMessage           base_link -> the camera's frame (camera known)
/edge_deploy/lanes             visualization_msgs/msg/ImageMarker  every lane's segments in pixels (LINE_LIST)
/edge_deploy/markers           visualization_msgs/msg/MarkerArray  the lane markers' cubics in base_link (camera)
/edge_deploy/lane_markers      edge_deploy_msgs/msg/LaneMarkers    the markers as in the JSON (camera)
/edge_deploy/detections        vision_msgs/msg/Detection2DArray    an object detector's boxes (infer --detector)
/edge_deploy/detections/image  visualization_msgs/msg/ImageMarker  the same boxes as an overlay (LINE_LIST)

Every message carries the frame's stamp; /tf_static is repeated with each frame so a viewer that joins late (or a
scrub to the middle of the file) still has it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..media.stamped import CameraSetup, FrameResult
from .types import make, message_class, serialize

IMAGE = "/edge_deploy/image/compressed"
CAMERA_INFO = "/edge_deploy/camera_info"
TF_STATIC = "/tf_static"
LANES = "/edge_deploy/lanes"
MARKERS = "/edge_deploy/markers"
LANE_MARKERS = "/edge_deploy/lane_markers"
DETECTIONS = "/edge_deploy/detections"
DETECTION_BOXES = "/edge_deploy/detections/image"
CHANNELS = {
    IMAGE: "sensor_msgs/msg/CompressedImage",
    CAMERA_INFO: "sensor_msgs/msg/CameraInfo",
    TF_STATIC: "tf2_msgs/msg/TFMessage",
    LANES: "visualization_msgs/msg/ImageMarker",
    MARKERS: "visualization_msgs/msg/MarkerArray",
    LANE_MARKERS: "edge_deploy_msgs/msg/LaneMarkers",
    DETECTIONS: "vision_msgs/msg/Detection2DArray",
    DETECTION_BOXES: "visualization_msgs/msg/ImageMarker",
}
BASE_FRAME = "base_link"
JPEG_QUALITY = 90
LINE_WIDTH_PX = 3.0
_SAMPLES = 30  # points along each marker's cubic


@dataclass(frozen=True)
class Message:
    """A serialized message: its channel (topic), type and CDR bytes, and its log time (the frame's stamp, ns)."""

    topic: str
    msgtype: str
    data: bytes
    log_time_ns: int


def run_channels(camera: bool, detections: bool = False) -> dict[str, str]:
    """The channels (topic -> type, in the order of CHANNELS) whose messages a run publishes: /tf_static and the
    markers only with a camera, the boxes only with an object detector (what frame_messages makes)."""
    left_out = set() if camera else {TF_STATIC, MARKERS, LANE_MARKERS}
    left_out |= set() if detections else {DETECTIONS, DETECTION_BOXES}
    return {topic: msgtype for topic, msgtype in CHANNELS.items() if topic not in left_out}


def frame_messages(result: FrameResult) -> list[Message]:
    """The messages of one frame, in the order of CHANNELS (the camera's only when it is known)."""
    frame = result.frame
    header = _header(frame.stamp_ns, frame.frame_id)
    built: list[tuple[str, Any]] = [
        (IMAGE, _compressed_image(frame.image, frame.jpeg, header)),
        (CAMERA_INFO, _camera_info(frame.image, result.setup, header)),
    ]
    if result.setup is not None:
        built.append((TF_STATIC, _tf_static(result.setup, frame.stamp_ns)))
    built.append((LANES, _image_marker(result.lanes, header)))
    if result.setup is not None and result.found is not None:
        markers = result.found.markers
        built.append((MARKERS, _marker_array(markers, result.setup, frame.stamp_ns)))
        built.append((LANE_MARKERS, _lane_markers(markers, header)))
    if result.detections is not None:
        built.append((DETECTIONS, _detections(result.detections, header)))
        built.append((DETECTION_BOXES, _box_marker(result.detections, header)))
    return [Message(topic, CHANNELS[topic], serialize(msg, CHANNELS[topic]), frame.stamp_ns) for topic, msg in built]


def _header(stamp_ns: int, frame_id: str) -> Any:
    stamp = make("builtin_interfaces/msg/Time", sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
    return make("std_msgs/msg/Header", stamp=stamp, frame_id=frame_id)


def _compressed_image(image: Any, jpeg: bytes | None, header: Any) -> Any:
    """The frame as JPEG: the source's own bytes when it held a JPEG, else encoded here."""
    import cv2
    import numpy as np

    if jpeg is not None:
        data = np.frombuffer(jpeg, dtype=np.uint8)
    else:
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:  # pragma: no cover - OpenCV always has a JPEG encoder
            raise RuntimeError("OpenCV could not encode a JPEG")
    return make("sensor_msgs/msg/CompressedImage", header=header, format="jpeg",
                data=np.asarray(data, dtype=np.uint8).ravel())


def _camera_info(image: Any, setup: CameraSetup | None, header: Any) -> Any:
    import numpy as np

    h, w = image.shape[:2]
    if setup is None:
        return make("sensor_msgs/msg/CameraInfo", header=header, height=h, width=w)
    camera = setup.camera
    k = np.asarray(camera.camera_matrix, dtype=np.float64)
    p = np.zeros((3, 4))
    p[:, :3] = k
    return make("sensor_msgs/msg/CameraInfo", header=header, height=int(camera.height), width=int(camera.width),
                distortion_model=camera.distortion_model,
                d=np.asarray(camera.distortion, dtype=np.float64).ravel().copy(), k=k.ravel().copy(),
                r=np.eye(3).ravel(), p=p.ravel())


def camera_pose(setup: CameraSetup) -> tuple[Any, Any]:
    """(translation, quaternion x y z w) of the camera's optical frame in base_link."""
    import numpy as np
    from scipy.spatial.transform import Rotation

    camera = setup.camera
    rotation = camera.mounting.rotation().T  # camera axes in the vehicle frame
    translation = np.array([setup.offset_xy[0], setup.offset_xy[1], camera.mounting.height_m])
    return translation, Rotation.from_matrix(rotation).as_quat()


def _tf_static(setup: CameraSetup, stamp_ns: int) -> Any:
    translation, q = camera_pose(setup)
    transform = make("geometry_msgs/msg/Transform",
                     translation=make("geometry_msgs/msg/Vector3", x=float(translation[0]), y=float(translation[1]),
                                      z=float(translation[2])),
                     rotation=make("geometry_msgs/msg/Quaternion", x=float(q[0]), y=float(q[1]), z=float(q[2]),
                                   w=float(q[3])))
    stamped = make("geometry_msgs/msg/TransformStamped", header=_header(stamp_ns, BASE_FRAME),
                   child_frame_id=setup.frame_id, transform=transform)
    return make("tf2_msgs/msg/TFMessage", transforms=[stamped])


def score_color(score: float) -> tuple[float, float, float]:
    """RGB of a lane's score: red (0) through yellow to green (1)."""
    s = min(1.0, max(0.0, float(score)))
    return (min(1.0, 2.0 * (1.0 - s)), min(1.0, 2.0 * s), 0.1)


def _color(rgb: tuple[float, float, float], a: float = 1.0) -> Any:
    return make("std_msgs/msg/ColorRGBA", r=rgb[0], g=rgb[1], b=rgb[2], a=a)


def _image_marker(lanes: list[Any], header: Any) -> Any:
    point = message_class("geometry_msgs/msg/Point")
    points, colors = [], []
    for lane in lanes:
        color = _color(score_color(lane.score))
        pts = [point(x=x, y=y, z=0.0) for x, y in lane.points.astype(float).tolist()]
        for a, b in zip(pts, pts[1:]):
            points += [a, b]
            colors += [color, color]
    return make("visualization_msgs/msg/ImageMarker", header=header, ns="edge_deploy/lanes", id=0, type=2,
                action=0, scale=LINE_WIDTH_PX, outline_color=_color((0.0, 1.0, 0.0)), points=points,
                outline_colors=colors)


def _marker_array(markers: Any, setup: CameraSetup, stamp_ns: int) -> Any:
    import numpy as np

    header = _header(stamp_ns, BASE_FRAME)
    out = [make("visualization_msgs/msg/Marker", header=header, ns="edge_deploy/lane_markers", action=3)]  # DELETEALL
    ego = {id(m) for m in (markers.ego_left, markers.ego_right) if m is not None}
    pose = make("geometry_msgs/msg/Pose", orientation=make("geometry_msgs/msg/Quaternion", w=1.0))
    dx, dy = setup.offset_xy
    for index, marker in enumerate(markers):
        xs = np.linspace(max(0.0, marker.longitude_start), max(marker.longitude_start, marker.view_range), _SAMPLES)
        ys = np.asarray(marker.y_at(xs))
        is_ego = id(marker) in ego
        point = message_class("geometry_msgs/msg/Point")
        points = [point(x=x + dx, y=y + dy, z=0.0) for x, y in zip(xs.tolist(), ys.tolist())]
        out.append(make("visualization_msgs/msg/Marker", header=header, ns="edge_deploy/lane_markers", id=index,
                        type=4, action=0, pose=pose,
                        scale=make("geometry_msgs/msg/Vector3", x=0.3 if is_ego else 0.12),
                        color=_color((0.1, 1.0, 0.2) if is_ego else (0.85, 0.85, 0.85)), points=points))
    return make("visualization_msgs/msg/MarkerArray", markers=out)


def _lane_marker(marker: Any) -> Any:
    if marker is None:
        return make("edge_deploy_msgs/msg/LaneMarker", id=-1)
    return make("edge_deploy_msgs/msg/LaneMarker", id=-1 if marker.id is None else int(marker.id),
                c0=float(marker.c0), c1=float(marker.c1), c2=float(marker.c2), c3=float(marker.c3),
                view_range=float(marker.view_range), quality=float(marker.quality))


def _lane_markers(markers: Any, header: Any) -> Any:
    return make("edge_deploy_msgs/msg/LaneMarkers", header=header,
                has_ego_left=markers.ego_left is not None, ego_left=_lane_marker(markers.ego_left),
                has_ego_right=markers.ego_right is not None, ego_right=_lane_marker(markers.ego_right),
                next_left=[_lane_marker(m) for m in markers.next_left],
                next_right=[_lane_marker(m) for m in markers.next_right])


def _detections(detections: Any, header: Any) -> Any:
    """An edge_deploy.detect.Detections as vision_msgs/Detection2DArray: each box by its centre and size in the
    frame's pixels, one hypothesis (the class number as class_id, the score), ids "0", "1", ... best first."""
    items = []
    for index, ((x1, y1, x2, y2), score, cls) in enumerate(zip(detections.boxes.astype(float).tolist(),
                                                             detections.scores.astype(float).tolist(),
                                                             detections.classes.tolist())):
        center = make("vision_msgs/msg/Pose2D", position=make("vision_msgs/msg/Point2D", x=(x1 + x2) / 2,
                                                               y=(y1 + y2) / 2))
        bbox = make("vision_msgs/msg/BoundingBox2D", center=center, size_x=x2 - x1, size_y=y2 - y1)
        hypothesis = make("vision_msgs/msg/ObjectHypothesisWithPose",
                          hypothesis=make("vision_msgs/msg/ObjectHypothesis", class_id=str(int(cls)), score=score))
        items.append(make("vision_msgs/msg/Detection2D", header=header, results=[hypothesis], bbox=bbox,
                          id=str(index)))
    return make("vision_msgs/msg/Detection2DArray", header=header, detections=items)


def _box_marker(detections: Any, header: Any) -> Any:
    """The boxes' four edges each as LINE_LIST segments, coloured by score (as the lanes are)."""
    point = message_class("geometry_msgs/msg/Point")
    points, colors = [], []
    for (x1, y1, x2, y2), score in zip(detections.boxes.astype(float).tolist(), detections.scores.tolist()):
        color = _color(score_color(score))
        corners = [point(x=x1, y=y1, z=0.0), point(x=x2, y=y1, z=0.0), point(x=x2, y=y2, z=0.0),
                   point(x=x1, y=y2, z=0.0)]
        for a, b in zip(corners, corners[1:] + corners[:1]):
            points += [a, b]
            colors += [color, color]
    return make("visualization_msgs/msg/ImageMarker", header=header, ns="edge_deploy/detections", id=0, type=2,
                action=0, scale=LINE_WIDTH_PX, outline_color=_color((0.0, 0.6, 1.0)), points=points,
                outline_colors=colors)
