"""The edge_deploy_msgs package shipped in edge_deploy/ros/msg: the .msg files parse as ROS 2 definitions, the
ament package names both, and docs/recordings.md shows them as they are."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("rosbags")

from edge_deploy.ros.types import CUSTOM, MSG_PACKAGE, schema  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "recordings.md"


def test_the_docs_show_the_msg_files_as_shipped():
    text = DOCS.read_text()
    for name in ("LaneMarker", "LaneMarkers"):
        block = re.search(rf"`edge_deploy_msgs/msg/{name}\.msg`:\n\n```\n(.*?)```", text, re.S)
        assert block is not None, name
        assert block.group(1) == (MSG_PACKAGE / "msg" / f"{name}.msg").read_text()


def test_the_ament_package_generates_both_messages():
    cmake = (MSG_PACKAGE / "CMakeLists.txt").read_text()
    ours = [name for name in CUSTOM if name.startswith("edge_deploy_msgs/")]
    assert len(ours) == 2 and all(f'"msg/{name.rsplit("/", 1)[1]}.msg"' in cmake for name in ours)
    assert "<name>edge_deploy_msgs</name>" in (MSG_PACKAGE / "package.xml").read_text()


def test_the_lane_markers_schema_carries_the_lane_marker_definition():
    text = schema("edge_deploy_msgs/msg/LaneMarkers").decode()
    assert text.startswith("std_msgs/Header header\nbool has_ego_left\nedge_deploy_msgs/LaneMarker ego_left\n")
    assert "MSG: edge_deploy_msgs/LaneMarker\nint32 id\nfloat64 c0\n" in text and "MSG: std_msgs/Header" in text


def test_the_vision_msgs_subset_is_the_humble_definition():
    """vision_msgs 4.1.1's Detection2DArray as ROS 2 Humble ships it: the schema a recording names."""
    text = schema("vision_msgs/msg/Detection2DArray").decode()
    assert text.startswith("std_msgs/Header header\nvision_msgs/Detection2D[] detections\n")
    for part in ("MSG: vision_msgs/Detection2D\nstd_msgs/Header header\nvision_msgs/ObjectHypothesisWithPose[] results\n"
                 "vision_msgs/BoundingBox2D bbox\nstring id\n",
                 "MSG: vision_msgs/ObjectHypothesis\nstring class_id\nfloat64 score\n",
                 "MSG: vision_msgs/BoundingBox2D\nvision_msgs/Pose2D center\nfloat64 size_x\nfloat64 size_y\n",
                 "MSG: vision_msgs/Pose2D\nvision_msgs/Point2D position\nfloat64 theta\n"):
        assert part in text, part
