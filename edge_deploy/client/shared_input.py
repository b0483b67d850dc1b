"""One upload of a frame's input for every model that takes it (a PerceptionStream's detectors on one server).

The client that converts a frame (`ModelClient.share`) copies the input once into a shared-memory region of its
`SharedInputPool`; every client of the same server with shared memory sends that region's name instead of
copying the tensor into a region of its own. A region goes back to the pool, to be written again, only when its
owner of the moment says so (`SharedUpload.give_back`): a PerceptionStream does once a newer frame replaced that
frame and every call that took it has returned.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .shm import ShmRegion

__all__ = ["SharedInputPool", "SharedUpload"]


@dataclass(eq=False)
class SharedUpload:
    """One frame's input in a shared region: its name and size, and the server it is registered with."""

    region: ShmRegion
    nbytes: int
    url: str
    pool: "SharedInputPool"

    @property
    def name(self) -> str:
        return self.region.name

    def give_back(self) -> None:
        """No request reads this upload any more: its region may hold the next one."""
        self.pool.give_back(self.region)


class SharedInputPool:
    """The regions a client uploads shared inputs into, reused across frames: never more than the uploads not given
    back at once (one per call still waiting for its answer, plus each input's newest frame)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._free: list[ShmRegion] = []
        self._all: list[ShmRegion] = []
        self._lock = threading.Lock()
        self.uploads = 0  # one per frame and input, however many models take it

    def upload(self, tensor: np.ndarray) -> SharedUpload:
        """`tensor` copied into a free region (a new one when none is big enough)."""
        with self._lock:
            region = next((r for r in self._free if r.byte_size >= tensor.nbytes), None)
            if region is not None:
                self._free.remove(region)
            else:
                region = ShmRegion(max(tensor.nbytes, 1), "shared_in")
                self._all.append(region)
            self.uploads += 1
        np.copyto(region.array(tensor.dtype, tensor.shape), tensor)
        return SharedUpload(region, tensor.nbytes, self.url, self)

    def give_back(self, region: ShmRegion) -> None:
        with self._lock:
            if not region.closed and region not in self._free:
                self._free.append(region)

    def close(self) -> list[ShmRegion]:
        """Every region, unlinked; returned so that the owner unregisters their names."""
        with self._lock:
            regions, self._all, self._free = self._all, [], []
        for region in regions:
            region.close()
        return regions
