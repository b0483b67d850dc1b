"""Synthetic roads: each scene's frame, camera and true markers (roads.py), what parity, export, evaluate, bench,
fleet, training and `sample` check with. Not inference: the client never imports it."""
