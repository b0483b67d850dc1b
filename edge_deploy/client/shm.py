"""System shared memory regions for LaneDetClient: created once, reused, never leaked.

A region is a POSIX shared memory object (/dev/shm/<name>) made with
tritonclient's shared-memory utilities and registered with the server under
the same name. Names carry the pid and a random suffix, so two clients (in one
process or in several) never collide. `close()` unlinks the object; a
`weakref.finalize` does the same at interpreter exit or when the region is
garbage-collected, and never in a forked child (the parent owns the name).

tritonclient creates the object with mode 0600, which a tritonserver running as
another user cannot open. The system unit of `edge-deploy serve` runs as user
edge-deploy with group video, so regions get mode 0660 and, when this process
is in the group named by $EDGE_DEPLOY_SHM_GROUP (default video), that group.
"""
from __future__ import annotations

import grp
import os
import uuid
import weakref
from typing import Any

import numpy as np

from ..errors import ClientError

NAME_PREFIX = "edge_deploy_"
GROUP_ENV = "EDGE_DEPLOY_SHM_GROUP"
DEFAULT_GROUP = "video"  # the group of the Jetson GPU device nodes, which the system unit's server has


def region_name(role: str) -> str:
    """A name no other client uses: prefix, pid, random suffix, role."""
    return f"{NAME_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:12]}_{role}"


def shared_group() -> int | None:
    """The gid of group $EDGE_DEPLOY_SHM_GROUP (default video) if this process is in it, else None."""
    try:
        gid = grp.getgrnam(os.environ.get(GROUP_ENV, DEFAULT_GROUP)).gr_gid
    except KeyError:  # no such group here
        return None
    return gid if gid == os.getegid() or gid in os.getgroups() else None


def _release(handle: Any, key: str, owner_pid: int) -> None:
    """Close and unlink one region (the finalizer: must not reference the ShmRegion)."""
    if os.getpid() != owner_pid:
        return
    from tritonclient.utils import shared_memory as tshm

    try:
        tshm.destroy_shared_memory_region(handle)
    except BufferError:
        # Someone still holds a numpy view: the views keep the mmap object (and the mapping)
        # alive until the last one dies; the name must go now so nothing is left in /dev/shm.
        mpsm = handle._mpsm_handle
        mpsm._mmap = None
        mpsm.close()
        try:
            mpsm.unlink()
        except FileNotFoundError:
            pass
        tshm._key_mapping.pop(key, None)
    except (FileNotFoundError, KeyError):
        pass


class ShmRegion:
    """One system shared memory region owned by this process.

    `array(dtype, shape, offset)` gives a numpy view straight into the mapping,
    so preprocessing can write the model input in place and decoding can read
    the model output without a copy. Drop the views before `close()`.
    """

    def __init__(self, byte_size: int, role: str) -> None:
        from tritonclient.utils import shared_memory as tshm

        if byte_size <= 0:
            raise ValueError(f"shared memory region size must be positive, got {byte_size}")
        self.name = region_name(role)
        self.key = "/" + self.name
        self.byte_size = int(byte_size)
        try:
            self._handle = tshm.create_shared_memory_region(self.name, self.key, self.byte_size, create_only=True)
        except tshm.SharedMemoryException as exc:
            cause = exc.__cause__ or exc
            raise ClientError(f"cannot make a {self.byte_size}-byte shared memory region in /dev/shm ({cause}): "
                              "/dev/shm is full or limited here; free space there (`df -h /dev/shm`), or send the "
                              "tensors inside the requests (transport='grpc', `--transport grpc`).") from None
        self._finalizer = weakref.finalize(self, _release, self._handle, self.key, os.getpid())
        fd = self._handle._mpsm_handle._fd  # the multiprocessing.SharedMemory's descriptor of /dev/shm/<name>
        os.fchmod(fd, 0o660)
        gid = shared_group()
        if gid is not None:
            os.fchown(fd, -1, gid)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def array(self, dtype: Any, shape: tuple[int, ...], offset: int = 0) -> np.ndarray:
        """A writable numpy view of `shape` at byte `offset` of the region."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if offset < 0 or offset + nbytes > self.byte_size:
            raise ValueError(f"view of {nbytes} bytes at {offset} does not fit region {self.name} ({self.byte_size} bytes)")
        # np.frombuffer keeps a buffer export on the mmap for as long as the array lives, so
        # the mmap cannot be unmapped under a live view (close() then only unlinks the name).
        # np.ndarray(buffer=...) over SharedMemory.buf would drop its export: a use-after-unmap.
        count = int(np.prod(shape))
        flat = np.frombuffer(self._handle._mpsm_handle._mmap, dtype=dtype, count=count, offset=offset)
        return flat.reshape(shape)

    def register(self, client: Any, client_timeout: float | None) -> None:
        """Register with the server behind a tritonclient gRPC client (sync)."""
        client.register_system_shared_memory(self.name, self.key, self.byte_size, client_timeout=client_timeout)

    async def register_async(self, client: Any, client_timeout: float | None) -> None:
        """Register with the server behind a tritonclient.grpc.aio client."""
        await client.register_system_shared_memory(self.name, self.key, self.byte_size, client_timeout=client_timeout)

    def close(self) -> None:
        """Close the mapping and unlink the name (idempotent)."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"ShmRegion({self.name!r}, {self.byte_size} bytes{', closed' if self.closed else ''})"


def leftover_regions(pid: int | None = None) -> list[str]:
    """Names in /dev/shm created by edge-deploy clients (of `pid` if given)."""
    prefix = NAME_PREFIX if pid is None else f"{NAME_PREFIX}{pid}_"
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
    except FileNotFoundError:
        return []
