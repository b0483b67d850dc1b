"""Why tritonserver failed, read from its output: the most informative line of its log."""
from __future__ import annotations

import os
from pathlib import Path

_LOG_NOISE = ("CudaDriverHelper has not been initialized", "Unable to allocate pinned system memory")


def last_error_line(log_path: Path, offset: int = 0) -> str:
    """The most informative line of a tritonserver log.

    A model's own error (failed to load / poll failed) beats the generic
    "failed to load all models" line that follows it; then any error; then the last line.
    Only what follows byte `offset` is read.
    """
    try:
        with open(log_path, "rb") as fh:
            if offset > os.fstat(fh.fileno()).st_size:
                offset = 0  # the log was rotated since (edge_deploy.serve.logfile)
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return "no server log"
    return reason_from_log(text)


def reason_from_log(text: str) -> str:
    """`last_error_line` for log text already read (e.g. from journalctl)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [
        ln for ln in lines
        if (ln.startswith("E") and ln[1:2].isdigit() or ln.startswith("error:")) and not any(n in ln for n in _LOG_NOISE)
    ]
    for line in reversed(errors):
        if "model" in line and "failed to load all models" not in line:
            return _clean(line)
    if errors:
        return _clean(errors[-1])
    for line in reversed(lines):
        if "failed to load" in line or "UNAVAILABLE" in line:
            return _clean(line)
    return _clean(lines[-1]) if lines else "the server printed nothing"


def _clean(line: str) -> str:
    # "E1122 06:52:19.798981 10086 file.cc:1460] \"message\"" -> "message"
    if line[:1] in "EWI" and "] " in line:
        line = line.split("] ", 1)[1].strip().strip('"')
    # Python-backend errors carry their traceback as literal "\\n"s: keep the first line.
    return line.split("\\n", 1)[0].strip()[:400]
