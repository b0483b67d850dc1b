"""`LaneStream(..., process=True)`: the stream's reader and worker in a child process, so that decoding lanes never
holds the app's interpreter (its GIL) while the app's own threads want it.

The child runs an ordinary LaneStream with its own client, made from the app's client's settings
(`type(client).from_settings`), on a source it opens itself (a camera, a pipeline or a file: a callable or an
iterable cannot cross a process). Each new result, without its frame, is pickled into a `ResultBoard`: two slots
of shared memory, each with its sequence number, length and a BLAKE2 digest of its bytes. The writer fills the
slot that does not hold the newest result; `latest()` reads both and takes the newest whose digest matches, so it
never waits for the child and needs no lock nor any ordering of the child's stores: a slot caught half-written
fails its digest and the other slot is read. The call in flight's start time sits in a word of its own, so the
app's side computes the state ("unavailable" after max_age without an answer) as LaneStream does.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import pickle
import struct
import time
from dataclasses import replace
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any, TypedDict

from ..errors import ClientError
from .stream_loop import failure_text

if TYPE_CHECKING:  # types only
    from ..geometry.camera import Camera

__all__ = ["ResultBoard", "ProcessStream"]

SLOT_BYTES = 1 << 20  # one result, pickled without its frame: lanes and markers take a few KiB
_HEADER = struct.Struct("<QQ16s")  # seq, payload length, BLAKE2b-128 digest of the payload
_CALL = struct.Struct("<d")  # monotonic start of the call in flight (0: none), at offset 0
_SLOTS_AT = 8
START_WITHIN = 60.0  # seconds for the child to start (a fresh interpreter importing numpy, OpenCV, tritonclient)


def _digest(payload: bytes | memoryview) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()


class ResultBoard:
    """The newest result of a child's stream, in shared memory (module docstring). `create()` in the app,
    `attach(name)` in the child."""

    def __init__(self, memory: shared_memory.SharedMemory, owner: bool) -> None:
        self._memory = memory
        self._owner = owner
        self._written = 0  # the writer's: results written

    @classmethod
    def create(cls) -> "ResultBoard":
        size = _SLOTS_AT + 2 * (_HEADER.size + SLOT_BYTES)
        memory = shared_memory.SharedMemory(create=True, size=size)
        memory.buf[:size] = bytes(size)  # type: ignore[index]
        return cls(memory, owner=True)

    @classmethod
    def attach(cls, name: str) -> "ResultBoard":
        return cls(shared_memory.SharedMemory(name=name), owner=False)

    @property
    def name(self) -> str:
        return self._memory.name

    @property
    def _buf(self) -> memoryview:
        buf = self._memory.buf
        assert buf is not None, "the board is closed"
        return buf

    def _slot(self, index: int) -> int:
        return _SLOTS_AT + index * (_HEADER.size + SLOT_BYTES)

    def write(self, result: Any) -> None:
        payload = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) > SLOT_BYTES:
            raise ClientError(f"a lane result of {len(payload)} bytes does not fit the process stream's "
                              f"{SLOT_BYTES}-byte slot.")
        self._written += 1
        at = self._slot(self._written % 2)  # never the slot holding the newest result
        buf = self._buf
        _HEADER.pack_into(buf, at, 0, 0, bytes(16))  # emptied first: a reader never takes old bytes under a new seq
        buf[at + _HEADER.size: at + _HEADER.size + len(payload)] = payload
        _HEADER.pack_into(buf, at, self._written, len(payload), _digest(payload))

    def read(self) -> Any | None:
        """The newest whole result, or None before the first."""
        buf = self._buf
        best: tuple[int, Any] | None = None
        for index in (0, 1):
            at = self._slot(index)
            seq, length, digest = _HEADER.unpack_from(buf, at)
            if seq == 0 or length > SLOT_BYTES or (best is not None and seq <= best[0]):
                continue
            payload = bytes(buf[at + _HEADER.size: at + _HEADER.size + length])
            if _digest(payload) != digest or _HEADER.unpack_from(buf, at)[0] != seq:
                continue  # caught while the child rewrote it: the other slot is whole
            best = (seq, pickle.loads(payload))
        return best[1] if best is not None else None

    def set_call(self, started: float | None) -> None:
        _CALL.pack_into(self._buf, 0, started or 0.0)

    def call_started(self) -> float | None:
        started = _CALL.unpack_from(self._buf, 0)[0]
        return started or None

    def close(self) -> None:
        self._memory.close()
        if self._owner:
            try:
                self._memory.unlink()
            except FileNotFoundError:
                pass


class ChildOptions(TypedDict):
    """The LaneStream keyword arguments the child's stream is made with (the app's, as given)."""

    max_age: float
    deadline: float
    camera: Camera | None
    track: bool
    fps: float | None
    speed_mps: float | None


def _run_child(board_name: str, stream_type: Any, client_type: Any, settings: Any, source: Any,
               options: ChildOptions, stop: Any, report: Any) -> None:
    """The child: a `stream_type` (LaneStream) whose results go onto the board; its stats to `report` when `stop` is
    set."""
    board = ResultBoard.attach(board_name)
    stream = None
    try:
        client = client_type.from_settings(settings, connect=False)
        stream = stream_type(client, source, on_result=lambda r: board.write(replace(r, frame=None)),
                            on_call=board.set_call, **options)
        stream.start()
        report.send(("started", None))
        while not stop.wait(0.05) and stream.running:
            pass
        report.send(("stats", stream.stats()))  # first: the app's stop() waits for these, not for the release
        stream.stop()
    except Exception as exc:  # noqa: BLE001 - told to the app in one line, not a traceback in its terminal
        report.send(("error", failure_text(exc)))
    finally:
        board.close()


class ProcessStream:
    """The app's side of a stream run in a child process (LaneStream's process=True)."""

    def __init__(self, stream_type: Any, client: Any, source: Any, options: ChildOptions) -> None:
        from_settings = getattr(type(client), "from_settings", None)
        if not callable(from_settings) or getattr(client, "settings", None) is None:
            raise ClientError(f"process=True makes the stream's own client in a child process from the app's client's "
                              f"settings; {type(client).__name__} has none: pass a LaneDetClient, or process=False.")
        if not isinstance(source, (str, int)) or isinstance(source, bool):
            raise ClientError("process=True opens the source in a child process: give a camera, GStreamer pipeline "
                              f"or video file by name (not a {type(source).__name__}), or process=False.")
        self._args = (stream_type, type(client), client.settings, source, options)
        self._context = multiprocessing.get_context("spawn")  # no fork of a process with threads and gRPC
        self._board: ResultBoard | None = None
        self._process: Any = None
        self._stop = self._context.Event()
        self._report, self._child_end = self._context.Pipe(duplex=False)
        self.stats_at_stop: Any = None

    def start(self, within: float = START_WITHIN) -> None:
        self._board = ResultBoard.create()
        self._process = self._context.Process(target=_run_child, name="lanestream-process", daemon=True,
                                              args=(self._board.name, *self._args, self._stop, self._child_end))
        self._process.start()
        if not self._report.poll(within):
            self.stop(0.0)
            raise ClientError(f"the stream's child process did not start within {within:g} s.")
        kind, value = self._report.recv()
        if kind == "error":
            self.stop(0.0)
            raise ClientError(f"the stream's child process failed: {value}")

    def newest(self) -> Any | None:
        return self._board.read() if self._board is not None else None

    def call_started(self) -> float | None:
        return self._board.call_started() if self._board is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def stop(self, within: float) -> None:
        """Tell the child to stop and wait `within` seconds for its stats. The child then stops its own stream
        (bounded as any LaneStream's), releases its client and exits on its own: it is not killed, so that its
        shared memory is unlinked and unregistered."""
        self._stop.set()
        end = time.monotonic() + within
        if self._process is not None:
            while self.stats_at_stop is None and self._report.poll(max(0.0, end - time.monotonic())):
                kind, value = self._report.recv()
                if kind == "stats":
                    self.stats_at_stop = value
        if self._board is not None:
            self._board.close()
            self._board = None
