"""A bench report for people: the terminal table and the PNG plot (drawn with OpenCV)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.fsutil import write_bytes_atomic
from .results import BenchReport, CellResult

COLUMNS = ("model", "pipeline", "conc.", "frames/s", "p50 ms", "p90 ms", "p99 ms", "client pre/req/dec ms",
           "server queue/compute ms", "CPU ms/frame client/server", "GPU % / power W")


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cell_row(cell: CellResult) -> list[str]:
    """One table row (strings, in COLUMNS' order)."""
    split = cell.client_split
    own = cell.server.get(cell.model)
    jetson = "-"
    if cell.jetson is not None:
        total = cell.jetson.total_mw
        jetson = f"{_num(cell.jetson.gpu_percent, 0)} / {_num(total / 1e3 if total is not None else None, 1)}"
    return [cell.model, cell.pipeline, str(cell.concurrency), f"{cell.frames_per_s:.1f}",
            _num(cell.latency.p50_ms), _num(cell.latency.p90_ms), _num(cell.latency.p99_ms),
            f"{split.preprocess_ms:.2f} / {split.request_ms:.2f} / {split.decode_ms:.2f}" if split else "-",
            f"{own.queue_ms:.2f} / {own.compute_ms:.2f}" if own else "-",
            f"{cell.client_cpu_ms_per_frame:.2f} / {_num(cell.server_cpu_ms_per_frame)}", jetson]


TABLE_MIN_WIDTH = 150  # the table's columns need about this many; a narrower terminal gets one block per cell


def print_report(report: BenchReport, console: Any) -> None:
    """The table on a wide terminal, one block of lines per cell on a narrow one (80 columns); `--json` for
    machines."""
    from rich.table import Table

    title = f"edge-deploy bench {report.url}: {report.seconds:g} s per cell, {report.frames}"
    if console.width >= TABLE_MIN_WIDTH:
        table = Table(*COLUMNS, title=title)
        for cell in report.cells:
            table.add_row(*cell_row(cell))
        console.print(table)
    else:
        console.print(title, highlight=False)
        for cell in report.cells:
            console.print("\n".join(cell_block(cell)), highlight=False, soft_wrap=False)
    console.print(f"{report.lanes_check}; {report.server_cpu}; {report.jetson}; load average "
                  f"{report.machine.get('load_average_start')} -> {report.machine.get('load_average_end')} "
                  f"({report.machine.get('cpus')} CPUs)", highlight=False)


def cell_block(cell: CellResult) -> list[str]:
    """One cell as short lines (the narrow layout): the table's columns as "name: value"."""
    row = dict(zip(COLUMNS, cell_row(cell)))
    lines = [f"{cell.model} ({cell.pipeline}), concurrency {cell.concurrency}: {row['frames/s']} frames/s",
             f"  latency ms p50 / p90 / p99: {row['p50 ms']} / {row['p90 ms']} / {row['p99 ms']}"]
    lines += [f"  {name}: {row[name]}" for name in COLUMNS[7:] if not (name.startswith("GPU") and row[name] == "-")]
    return lines


def markdown(report: BenchReport) -> str:
    """The table as Markdown (BENCHMARKS.md)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|" + "---:|" * (len(COLUMNS) - 2)]
    lines += ["| " + " | ".join(cell_row(cell)) + " |" for cell in report.cells]
    return "\n".join(lines)


# --- the plot -------------------------------------------------------------------------------------------------

_W, _PANEL_H, _MARGIN = 1200, 320, 70
_COLORS = [(180, 119, 31), (14, 127, 255), (44, 160, 44), (40, 39, 214), (189, 103, 148), (75, 86, 140)]


def write_plot(report: BenchReport, path: Path) -> Path:
    """Two panels, one bar group per concurrency and one colour per served model: frames/s, and latency
    p50 (bar) with p99 (tick). A PNG at `path`."""
    import cv2
    import numpy as np

    models = list(dict.fromkeys(c.model for c in report.cells))
    widths = list(dict.fromkeys(c.concurrency for c in report.cells))
    by = {(c.model, c.concurrency): c for c in report.cells}
    height = 2 * _PANEL_H + 3 * _MARGIN + 24 * len(models)
    img = np.full((height, _W, 3), 255, np.uint8)
    panels = [("frames/s", lambda c: c.frames_per_s, None), ("latency ms: p50 bar, p99 tick",
                                                             lambda c: c.latency.p50_ms, lambda c: c.latency.p99_ms)]
    for k, (title, value, tick) in enumerate(panels):
        top = _MARGIN + k * (_PANEL_H + _MARGIN)
        cells = list(by.values())
        peak = max([value(c) for c in cells] + [tick(c) for c in cells if tick] + [1e-9])
        peak = float(peak) * 1.1 if np.isfinite(peak) else 1.0
        _axes(img, top, title, peak)
        group = (_W - 2 * _MARGIN) / max(len(widths), 1)
        bar = group * 0.8 / max(len(models), 1)
        for g, width in enumerate(widths):
            x0 = _MARGIN + g * group + group * 0.1
            cv2.putText(img, f"concurrency {width}", (int(x0), top + _PANEL_H + 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5,
                        (0, 0, 0), 1, cv2.LINE_AA)
            for m, model in enumerate(models):
                cell = by.get((model, width))
                if cell is None or not np.isfinite(value(cell)):
                    continue
                left, right = int(x0 + m * bar), int(x0 + (m + 1) * bar) - 2
                y = _y(top, value(cell), peak)
                cv2.rectangle(img, (left, y), (right, top + _PANEL_H), _COLORS[m % len(_COLORS)], -1)
                if tick is not None and np.isfinite(tick(cell)):
                    ty = _y(top, tick(cell), peak)
                    cv2.line(img, (left, ty), (right, ty), (0, 0, 0), 2)
    legend = 2 * (_PANEL_H + _MARGIN) + _MARGIN - 10
    for m, model in enumerate(models):
        pipeline = next(c.pipeline for c in report.cells if c.model == model)
        y = legend + 24 * m
        cv2.rectangle(img, (_MARGIN, y - 12), (_MARGIN + 16, y + 2), _COLORS[m % len(_COLORS)], -1)
        cv2.putText(img, f"{model} ({pipeline})", (_MARGIN + 24, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1,
                    cv2.LINE_AA)
    cv2.putText(img, f"edge-deploy bench {report.url}, {report.seconds:g} s per cell", (_MARGIN, 30),
                cv2.FONT_HERSHEY_SIMPLEX, 0.7, (0, 0, 0), 1, cv2.LINE_AA)
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, data = cv2.imencode(".png", img)
    if not ok:
        raise OSError(f"cannot encode the plot as PNG for {path}")
    write_bytes_atomic(path, data.tobytes(), 0o644)
    return path


def _y(top: int, value: float, peak: float) -> int:
    return int(top + _PANEL_H - min(value, peak) / peak * _PANEL_H)


def _axes(img: Any, top: int, title: str, peak: float) -> None:
    import cv2

    cv2.line(img, (_MARGIN, top), (_MARGIN, top + _PANEL_H), (0, 0, 0), 1)
    cv2.line(img, (_MARGIN, top + _PANEL_H), (_W - _MARGIN, top + _PANEL_H), (0, 0, 0), 1)
    for v in axis_ticks(peak):
        y = _y(top, v, peak)
        cv2.line(img, (_MARGIN - 4, y), (_W - _MARGIN, y), (225, 225, 225), 1)
        cv2.putText(img, tick_label(v), (4, y + 4), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(img, title, (_MARGIN, top - 10), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 0, 0), 1, cv2.LINE_AA)


def axis_ticks(peak: float) -> list[float]:
    """Round tick values from 0 up to `peak`: steps of 1, 2 or 5 times a power of ten, 3 to 7 of them."""
    import math

    if not peak > 0 or not math.isfinite(peak):
        return [0.0]
    raw = peak / 6
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    digits = max(0, -math.floor(math.log10(step)))
    return [round(i * step, digits) for i in range(int(peak / step + 1e-9) + 1)]


def tick_label(value: float) -> str:
    """A tick's number as people write it: 5000, 2.5, 0.05 (never 5e+03)."""
    import numpy as np

    return np.format_float_positional(value, trim="-")
