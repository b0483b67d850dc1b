"""The one error family of edge-deploy.

Every error a user can cause is an `EdgeDeployError` whose message is one line:
what failed, why, and what to do. The CLI prints it and exits with `exit_code`
(no traceback unless EDGE_DEPLOY_DEBUG=1).
"""
from __future__ import annotations


class EdgeDeployError(Exception):
    """Base class: a user-facing failure with a one-line message."""

    exit_code: int = 2


class MissingDependencyError(EdgeDeployError):
    """An optional package (torch, tensorrt, pycuda, ...) is not importable."""


class ManifestError(EdgeDeployError):
    """An artifact's manifest.json is missing, unreadable, of an unknown format, or damaged."""


class ConvertError(EdgeDeployError):
    """torch -> ONNX export, checking, simplification or parity failed."""


class CheckpointError(ConvertError):
    """A checkpoint is missing, unreadable or does not fit the model."""


class EngineError(EdgeDeployError):
    """ONNX -> TensorRT build or on-device verification failed."""


class RepositoryError(EdgeDeployError):
    """Installing into / managing the Triton model repository failed."""


class ServerError(EdgeDeployError):
    """Finding, launching or supervising tritonserver failed."""


class NotServingError(ServerError):
    """`status`/`health`: nothing serves (or not every model asked for is ready); exit 3."""

    exit_code = 3


class NumberError(EdgeDeployError, ValueError):
    """A duration, rate, count, size or coordinate that is not finite or lies outside its documented range
    (`edge_deploy.core.numbers.Range`): the message names the range."""


class ClientError(EdgeDeployError):
    """Base for errors raised by LaneDetClient."""


class FrameError(ClientError, ValueError):
    """A frame has the wrong shape or dtype, is empty, or holds non-finite values."""


class ServerUnavailableError(ClientError):
    """The server cannot be reached (or stayed unreachable past the deadline)."""


class ModelUnavailable(ClientError):
    """A call's `deadline` ran out before the model's answer came back (`ModelClient.infer`, any served model).
    `reason` says why, in a word: "unreachable" (no server answers), "not_ready" (the server answers but the model
    is not ready), "slow" (the server did not answer in time) or "busy" (another call of the same client held it
    past the deadline)."""

    def __init__(self, message: str, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self):  # noqa: ANN204 - pickled with its reason (multiprocessing, logging handlers)
        return type(self), (str(self), self.reason)


class LanesUnavailable(ModelUnavailable):
    """A lane client's call ran out of its `deadline` before its lanes came back (`reason` as for ModelUnavailable)."""


class ServerTimeoutError(ServerUnavailableError):
    """The server took the connection or the request but did not answer in time (busy or hung, not gone)."""


class ModelNotReadyError(ClientError):
    """The model is missing on the server or not ready."""


class ModelChangedError(ModelNotReadyError):
    """The server now serves another version of the model, with other outputs than the client was set up for."""


class ModelMismatchError(ClientError):
    """The served model's inputs/outputs do not fit a lane model."""


class TLSRefusedError(ServerUnavailableError):
    """The TLS handshake with the server failed (certificate refused, unknown CA, wrong server name, no TLS)."""


class CertificateError(EdgeDeployError):
    """Making, reading or using a TLS certificate or the vehicle CA failed."""


class EvaluationError(EdgeDeployError):
    """An evaluation data set, its files, or the lanes given to a metric are not usable."""


class GeometryError(EdgeDeployError):
    """Lanes cannot be put on the ground: a camera calibration, a mounting or an image point is not usable."""


class CalibrationError(GeometryError, ValueError):
    """A camera calibration file (camera_info YAML + mounting) is missing, malformed, or does not fit the frames."""


class DetectionError(EdgeDeployError, ValueError):
    """An object detector's outputs cannot be decoded: an unknown or unsupported output layout, a missing or wrongly
    shaped output, decode parameters out of range, or a letterbox that does not fit the frames."""


class PluginError(EdgeDeployError):
    """A lane-model family from another package failed (at import, its checks, or a call edge-deploy made of it):
    that package's bug, said so in one line, never reported as edge-deploy's."""


class BenchError(EdgeDeployError):
    """`edge-deploy bench` cannot run as asked: no lane model served, unusable frames or options, or pipelines
    of one model that do not give the same lanes."""


def brief(value: object, limit: int = 60) -> str:
    """A bounded excerpt of a value for a message: a number or a cut string as written, a container by its type and
    size, anything else by its type. Never the repr of the whole value: a YAML file of shared aliases (a
    "billion laughs") is small on disk, but its repr is not."""
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        digits = int(value.bit_length() * 0.30103) + 1  # str() of a huge int is refused, and unbounded anyway
        return repr(value) if digits <= 20 else f"an integer of about {digits} digits"
    if isinstance(value, str):
        return repr(value[:limit]) + ("..." if len(value) > limit else "")
    size = len(value) if isinstance(value, (list, tuple, dict, set, frozenset)) else None
    return f"a {type(value).__name__}" + (f" of {size} item{'s' if size != 1 else ''}" if size is not None else "")


def one_line(exc: BaseException | str, limit: int = 200, *, first_line: bool = False) -> str:
    """An exception's message (or a message: a str) on one line (whitespace collapsed, cut to `limit`); its type
    name when empty.

    tritonclient's exceptions keep their text in `message()`. `first_line` keeps
    only the first line, for libraries that append pages of C++ context.
    """
    message = getattr(exc, "message", None)
    text = str(message() if callable(message) else exc).strip()
    if first_line and text:
        text = text.splitlines()[0]
    return " ".join(text.split())[:limit] or type(exc).__name__


def os_error_message(exc: OSError) -> str:
    """One line for an OSError that reached the top: what failed, why, and what to do, by category."""
    import errno

    where = f" ({exc.filename})" if exc.filename else ""
    why = exc.strerror or one_line(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = "the file system is full: free space there (`df -h`) or write somewhere else, then run it again"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        advice = "run as a user allowed to write there, or choose another path"
    elif exc.errno == errno.EROFS:
        advice = "that file system is mounted read-only: choose a writable path"
    elif exc.errno == errno.ENOENT:
        advice = "check the path"
    elif exc.errno == errno.EMFILE:
        advice = "too many open files: raise the limit (`ulimit -n`) or close other programs"
    else:
        advice = "check the path and the file system"
    return f"{why}{where}; {advice}."


class OutputError(EdgeDeployError):
    """A file edge-deploy would write cannot be written there: the target exists and is not a regular file (a
    directory, a device node, a FIFO, a socket), is one of the command's inputs, or its directory is missing."""


class Terminated(BaseException):
    """The CLI got SIGTERM: raised in the main thread so every output under way is removed on the way out
    (a BaseException, like KeyboardInterrupt, so no `except Exception` takes it for an error to recover from)."""
