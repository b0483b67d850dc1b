"""Lane models: the family interface (`lane_family.py`: the `LaneFamily` base class and the registry;
`decode_params.py`, `datasets.py`, `tensor_spec.py`, `entry_points.py`; the convert side in `source.py`; `family.py`
re-exports them for families of other packages), `Lane`, preprocessing, drawing, the install<->client contract,
and one subpackage per family (`laneatt/`, `ufldv2/`, `clrnet/`). The gRPC client lives in
`edge_deploy.client`; training and synthetic roads in `edge_deploy.training`.

Only light modules are imported here; a family's model (e.g. `laneatt.model`) needs torch.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Lane", "decode_clrnet", "decode_lanes", "decode_ufldv2"]


def __getattr__(name: str) -> Any:
    if name == "Lane":
        from .lane import Lane

        return Lane
    if name == "decode_lanes":
        from .laneatt.decode import decode_lanes

        return decode_lanes
    if name == "decode_ufldv2":
        from .ufldv2.decode import decode_ufldv2

        return decode_ufldv2
    if name == "decode_clrnet":
        from .clrnet.decode import decode_clrnet

        return decode_clrnet
    raise AttributeError(f"module 'edge_deploy.lanedet' has no attribute {name!r}")
