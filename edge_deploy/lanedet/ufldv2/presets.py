"""UFLDv2's data-set presets: the official configs/{culane,tusimple}_res*.py and utils/common.py, as data.

Light (the standard library only): the family, the CLI and the client read it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from .decode import COL_ANCHOR, IMAGE_SIZES, NUM_LANES, ROW_ANCHORS


@dataclass(frozen=True)
class UFLDv2Preset:
    """The model geometry and preprocessing of one data set's official checkpoints."""

    name: str
    input_height: int  # train_height
    input_width: int  # train_width
    crop_ratio: float  # frames are resized to input_height / crop_ratio rows, the bottom input_height kept
    rows: int  # num_row: row anchors
    cols: int  # num_col: column anchors
    cells_row: int  # num_cell_row: grid cells along a row anchor
    cells_col: int  # num_cell_col
    fc_norm: bool  # LayerNorm before the MLP
    row_anchor: tuple[float, float]  # (start, end) of linspace(start, end, rows), fractions of the image height
    col_anchor: tuple[float, float]
    image_size: tuple[int, int]  # (H, W) of the data set's frames
    lanes: int = NUM_LANES

    @property
    def resized_height(self) -> int:
        return int(self.input_height / self.crop_ratio)  # as the official test transform computes it

    @property
    def feature_size(self) -> int:
        """Inputs of the MLP: (H / 32) x (W / 32) x 8, as the official model computes it."""
        return self.input_height // 32 * self.input_width // 32 * 8

    @property
    def total_dim(self) -> int:
        """Outputs of the MLP: the four outputs flattened."""
        return self.lanes * (self.cells_row * self.rows + self.cells_col * self.cols + 2 * self.rows + 2 * self.cols)


PRESETS = {
    "culane": UFLDv2Preset("culane", 320, 1600, 0.6, rows=72, cols=81, cells_row=200, cells_col=100, fc_norm=True,
                           row_anchor=ROW_ANCHORS["culane"], col_anchor=COL_ANCHOR, image_size=IMAGE_SIZES["culane"]),
    "tusimple": UFLDv2Preset("tusimple", 320, 800, 0.8, rows=56, cols=41, cells_row=100, cells_col=100,
                             fc_norm=False, row_anchor=ROW_ANCHORS["tusimple"], col_anchor=COL_ANCHOR,
                             image_size=IMAGE_SIZES["tusimple"]),
}
