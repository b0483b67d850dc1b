"""What runs beside the app: the package's own threads and the app's callbacks into them (threads.py)."""
from __future__ import annotations

from .threads import Threads, call_app, in_background

__all__ = ["Threads", "call_app", "in_background"]
