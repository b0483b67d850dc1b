"""The ROS 2 message types edge-deploy publishes: the standard ones (ROS 2 Humble's definitions, as rosbags knows
them), edge_deploy_msgs and the vision_msgs subset of /edge_deploy/detections (the .msg files shipped in msg/), their full ros2msg schemas and CDR serialization."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.deps import require

if TYPE_CHECKING:  # types only: rosbags is imported where a message is written
    from rosbags.interfaces.typing import Typesdict

MSG_DIR = Path(__file__).parent / "msg"
MSG_PACKAGE = MSG_DIR / "edge_deploy_msgs"
# Types ROS 2 Humble's store lacks, from the .msg files in msg/<package>/msg/ (vision_msgs: /edge_deploy/detections),
# in an order where each comes after the types it uses.
CUSTOM = ("edge_deploy_msgs/msg/LaneMarker", "edge_deploy_msgs/msg/LaneMarkers", "vision_msgs/msg/Point2D",
          "vision_msgs/msg/Pose2D", "vision_msgs/msg/BoundingBox2D", "vision_msgs/msg/ObjectHypothesis",
          "vision_msgs/msg/ObjectHypothesisWithPose", "vision_msgs/msg/Detection2D", "vision_msgs/msg/Detection2DArray")


@lru_cache(maxsize=1)
def typestore() -> Any:
    """A rosbags Typestore with ROS 2 Humble's types and edge_deploy_msgs registered."""
    typesys = require("rosbags.typesys", "writing ROS 2 messages")
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    found: Typesdict = {}
    for name in CUSTOM:
        package, _, kind = name.split("/")
        text = (MSG_DIR / package / "msg" / f"{kind}.msg").read_text()
        found.update(typesys.get_types_from_msg(text, name))
    store.register(found)
    return store


@lru_cache(maxsize=None)
def schema(msgtype: str) -> bytes:
    """The full ros2msg schema of `msgtype` (its definition, then each type it uses after a line of '='), as
    rosbag2 writes it in an MCAP file."""
    text, _ = typestore().generate_msgdef(msgtype, ros_version=2)
    return text.encode()


def serialize(message: Any, msgtype: str) -> bytes:
    return bytes(typestore().serialize_cdr(message, msgtype))


def message_class(msgtype: str) -> Any:
    """The rosbags dataclass of `msgtype` (every field a keyword argument)."""
    return typestore().types[msgtype]


def make(msgtype: str, **given: Any) -> Any:
    """A message of `msgtype` with the given fields and every other field zero, empty or its own default message."""
    fields, build = _defaults(msgtype)
    values = {name: given[name] if name in given else build() for name, build in fields}
    return build(**values)


@lru_cache(maxsize=None)
def _defaults(msgtype: str) -> tuple[tuple[tuple[str, Any], ...], Any]:
    """(field name, a function making its default value) of `msgtype`, and its class."""
    import numpy as np

    from rosbags.interfaces import Nodetype

    store = typestore()
    out = []
    for name, (kind, desc) in store.fielddefs[msgtype][1]:
        if kind == Nodetype.NAME:
            default: Any = lambda sub=desc: make(sub)  # noqa: E731
        elif kind == Nodetype.BASE:
            default = (lambda: "") if desc[0] == "string" else ((lambda: False) if desc[0] == "bool" else (lambda: 0))
        elif kind == Nodetype.ARRAY:
            (sub_kind, sub), length = desc
            default = ((lambda n=length, t=_numpy_type(sub[0]): np.zeros(n, dtype=t)) if sub_kind == Nodetype.BASE
                       else (lambda n=length, sub=sub: [make(sub) for _ in range(n)]))
        else:  # SEQUENCE
            (sub_kind, sub), _ = desc
            numeric = sub_kind == Nodetype.BASE and sub[0] != "string"
            default = (lambda t=_numpy_type(sub[0]): np.zeros(0, dtype=t)) if numeric else list
        out.append((name, default))
    return tuple(out), store.types[msgtype]


def _numpy_type(name: str) -> str:
    return {"float64": "float64", "float32": "float32", "uint8": "uint8", "int8": "int8", "octet": "uint8",
            "char": "uint8", "bool": "bool", "byte": "uint8"}.get(name, name)
