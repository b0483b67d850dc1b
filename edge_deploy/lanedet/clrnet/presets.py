"""CLRNet's data-set presets: the official configs/clrnet/clr_*_{culane,tusimple,llamas}.py, as data.

Light (the standard library only): the family, the CLI and the client read it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from .decode import MODEL_HEIGHT, MODEL_WIDTH, OFFICIAL, cut_fraction, resized_height

BACKBONES = ("resnet18", "resnet34", "resnet101", "dla34")
DEFAULT_DATASET, DEFAULT_BACKBONE = "culane", "resnet18"
# num_classes of the training-only seg decoder (heads.seg_decoder.conv): the one shape that tells a checkpoint's
# data set (CULane and LLAMAS both have 5).
SEG_CLASSES = {"culane": 5, "tusimple": 7, "llamas": 5}
# clr_dla34_llamas.py has nms_thres=50 where clr_resnet18_llamas.py has 60.
NMS_BY_BACKBONE = {("llamas", "dla34"): 50.0}


@dataclass(frozen=True)
class CLRNetPreset:
    """The frames, the cut and the test parameters of one data set's official configs."""

    name: str
    image_size: tuple[int, int]  # (H, W) of the data set's frames: ori_img_h, ori_img_w
    cut_height: int  # rows removed from the top of such a frame before the resize
    conf_threshold: float
    nms_threshold: float  # pixels at the 800-wide input
    max_lanes: int
    seg_classes: int
    input_height: int = MODEL_HEIGHT
    input_width: int = MODEL_WIDTH

    @property
    def resized_height(self) -> int:
        return resized_height(self.image_size[0], self.cut_height)

    @property
    def cut_fraction(self) -> float:
        return cut_fraction(self.image_size[0], self.cut_height)

    def nms_for(self, backbone: str) -> float:
        return NMS_BY_BACKBONE.get((self.name, backbone), self.nms_threshold)


PRESETS = {name: CLRNetPreset(name, size, cut, conf, nms, lanes, SEG_CLASSES[name])
           for name, (size, cut, conf, nms, lanes) in OFFICIAL.items()}
