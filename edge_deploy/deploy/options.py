"""`InstallOptions`: what `edge-deploy install` (and `deploy.install.install`) is asked, checked once."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RepositoryError
from ..artifact.precision import Precision
from ..repository.model_config import SERVED_ONNX, Priority, check_threads, priority_of
from ..repository.new_version import DEFAULT_NAME
from ..repository.pipeline_kind import PipelineKind, pipeline_kind
from ..repository.versions import DEFAULT_REPOSITORY, check_new_name


@dataclass(frozen=True)
class InstallOptions:
    """Install `artifact` as the next version of `name` in `repository`.

    pipeline: None installs the pipeline models NAME already has, of the kind it has (so a pipeline never pairs a
    new model with a stale pre/postprocess); True (the ensemble), "ensemble", "bls" or a PipelineKind install that
    pipeline; False none. precision: the ONNX file an ONNX runtime serves: None as converted (model_fp16.onnx for
    an FP16 artifact where no plan is served), FP16 model_fp16.onnx (`--precision fp16`), FP32 model.onnx or the
    plan (`--precision fp32`). tritonserver: the binary whose backends and TensorRT decide the runtime and check a plan.
    priority: high, normal or low (a Priority or its name): the model's optimization.priority and, with dynamic
    batching, its default priority level. threads: ONNX Runtime's intra- and inter-op threads (1 to
    model_config.MAX_THREADS; ONNX runtimes only, refused for a plan); None leaves ONNX Runtime's default.
    """

    artifact: Path
    repository: Path = DEFAULT_REPOSITORY
    name: str = DEFAULT_NAME
    runtime: str | None = None
    pipeline: bool | str | PipelineKind | None = None
    max_queue_delay_us: int | None = None
    instances: int = 1
    warmup: bool = False
    keep: int | None = None
    force: bool = False
    tritonserver: Path | str | None = None
    precision: Precision | None = None
    priority: Priority = Priority.NORMAL
    threads: int | None = None
    kind: PipelineKind | None = field(init=False)  # the pipeline asked for (None: none, or as installed)

    def __post_init__(self) -> None:
        object.__setattr__(self, "artifact", Path(self.artifact))
        object.__setattr__(self, "repository", Path(self.repository))
        check_new_name(self.name)
        object.__setattr__(self, "kind", pipeline_kind(self.pipeline))
        if self.precision is not None:
            object.__setattr__(self, "precision", _precision(self.precision))
        object.__setattr__(self, "priority", priority_of(self.priority))
        check_threads(self.threads)
        if self.instances < 1:
            raise RepositoryError(f"--instances must be at least 1 (got {self.instances}).")
        if self.keep is not None and self.keep < 1:
            raise RepositoryError(f"--keep must be at least 1 (got {self.keep}).")
        if self.max_queue_delay_us is not None and self.max_queue_delay_us < 0:
            raise RepositoryError(f"--max-queue-delay-us must be >= 0 (got {self.max_queue_delay_us}).")
        if not self.artifact.is_dir():
            raise RepositoryError(
                f"artifact directory {self.artifact} does not exist; create it with `edge-deploy convert`.")

    @property
    def follows_installed(self) -> bool:
        """Whether the pipeline is whatever NAME has installed (no pipeline argument given)."""
        return self.pipeline is None


def _precision(value: Precision | str) -> Precision:
    try:
        precision = Precision(value)
    except ValueError:
        precision = None
    if precision not in SERVED_ONNX:
        raise RepositoryError(f"install serves an ONNX file of precision {' or '.join(map(str, SERVED_ONNX))} "
                              f"(--precision {'|'.join(map(str, SERVED_ONNX))}), not {str(value)!r}.")
    return precision
