"""Does a model's config.pbtxt select what its server serves? The warning `models`, `status` and `health
--repository` print under a model when not (docs/failures.md).
"""
from __future__ import annotations

from pathlib import Path

from ..core.triton_layout import policy_now
from .pipelines import bls_version_unchanged
from .versions import PIPELINE_SUFFIXES


def config_disagreement(repository: Path, model: str, served: list[int] | list[str]) -> str | None:
    """One line when MODEL's config.pbtxt selects other versions than the server serves (`served`, non-empty), with
    the commands that settle it; None when they agree or nothing serves (a failed load is reported as such).

    They disagree after an install or rollback was cut off between its config write and the server's load: the
    server keeps serving the old version, and its next start would load the config's. A BLS pipeline is the
    exception: install and rollback leave the served pipeline serving when the version its config selects would do
    what the served one does (it calls whichever NAME is served; docs/pipelines.md, "Versions"), so that is no
    disagreement: a restart would serve a pipeline that does the same.
    """
    now = sorted(int(v) for v in served)
    selected = policy_now(repository, model)
    if not now or not selected or selected == now:
        return None
    if len(selected) == 1 and len(now) == 1 and model.endswith("_pipeline") and bls_version_unchanged(
            Path(repository), model, selected[0], lambda: now):
        return None
    base = model
    for suffix in PIPELINE_SUFFIXES:  # a pipeline model follows its lane model's rollback
        if model.endswith(suffix):
            base = model[: -len(suffix)]
    words = lambda vs: ", ".join(map(str, vs))  # noqa: E731
    repo = f" --repository {repository}"
    return (
        f"{model}: config.pbtxt selects version {words(selected)} but the server serves {words(now)} (an install or "
        f"rollback was cut off before the server loaded it; a restart would serve {words(selected)}): "
        f"`edge-deploy rollback {base} --to {now[-1]}{repo}` pins what serves, "
        f"`edge-deploy rollback {base} --to {selected[-1]}{repo}` serves what the config says"
    )
