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
    assert all(f'"msg/{name.rsplit("/", 1)[1]}.msg"' in cmake for name in CUSTOM)
    assert "<name>edge_deploy_msgs</name>" in (MSG_PACKAGE / "package.xml").read_text()


def test_the_lane_markers_schema_carries_the_lane_marker_definition():
    text = schema("edge_deploy_msgs/msg/LaneMarkers").decode()
    assert text.startswith("std_msgs/Header header\nbool has_ego_left\nedge_deploy_msgs/LaneMarker ego_left\n")
    assert "MSG: edge_deploy_msgs/LaneMarker\nint32 id\nfloat64 c0\n" in text and "MSG: std_msgs/Header" in text
