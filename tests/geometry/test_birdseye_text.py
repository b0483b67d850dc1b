"""The bird's-eye panel's figures stay readable (issue 56, item 11): no marker's extrapolated dots (from the vehicle
to where the marker was first seen) and no marker line run through the text in the panel's lower left. Real
markers fitted from points (geometry.markers.fit_marker) and the real panel; where the text lies is read from the
panel drawn with the same figures and no markers.
"""
from __future__ import annotations

import numpy as np

from edge_deploy.geometry.birdseye import _EGO_LINE, _OTHER_LINE, draw_birdseye
from edge_deploy.geometry.markers import LaneMarkers, fit_marker

HEIGHT = 400


def marker(c0: float, start: float, end: float = 60.0):
    xs = np.linspace(start, end, 30)
    found = fit_marker(np.stack([xs, np.full_like(xs, c0)], 1))
    assert found is not None
    return found


def coloured(panel: np.ndarray, bgr: tuple[int, int, int]) -> np.ndarray:
    return np.all(np.abs(panel.astype(int) - np.array(bgr)) <= 40, axis=-1)


def test_no_marker_runs_through_the_figures() -> None:
    # the lane to the left first seen 20 m ahead: its dots run from the vehicle (the panel's bottom) up the left side
    markers = LaneMarkers(marker(1.75, 6.0), marker(-1.75, 6.0), next_left=(marker(7.0, 20.0),))
    figures = markers.figures()
    text = draw_birdseye(LaneMarkers(None, None), HEIGHT, figures)
    white = np.all(text >= 245, axis=-1)  # the text's white (255), not the vehicle's grey (230)
    rows, cols = np.nonzero(white[HEIGHT // 2:])
    top, bottom, left, right = rows.min() + HEIGHT // 2 - 1, rows.max() + HEIGHT // 2 + 2, 0, cols.max() + 2
    panel = draw_birdseye(markers, HEIGHT, figures)
    dots = coloured(panel, _OTHER_LINE) | coloured(panel, _EGO_LINE)
    assert dots[:top].any(), "the markers are not drawn: the test sees nothing"
    inside = dots[top:bottom, left:right]
    assert not inside.any(), f"{int(inside.sum())} marker pixels among the figures (rows {top}-{bottom}, cols 0-{right})"
    assert np.array_equal(np.all(panel[top:bottom, left:right] >= 245, axis=-1), white[top:bottom, left:right])
