"""Lane results as ROS 2 messages (the `ros` extra: rosbags, mcap, websockets; imported where used): messages.py
(a frame's messages on the edge_deploy channels), types.py (the typestore, schemas, edge_deploy_msgs from msg/),
mcap_file.py (a rosbag2-compatible MCAP file, written atomically), live.py (a Foxglove WebSocket server),
publisher.py (the run loop's publish callback feeding both). Reading recordings is edge_deploy.media.bag."""
from __future__ import annotations

from .messages import CHANNELS
from .publisher import Publisher

__all__ = ["CHANNELS", "Publisher"]
