"""Issue 34 item 10: NaN or inf in a checkpoint's weights is named before the export (it was blamed on parity:
"differs by inf ...; the export does not reproduce the model")."""
from __future__ import annotations

import pytest
from needs import torch_or_skip

torch_or_skip()  # checkpoints and modules are torch's
from triton_helpers import run_cli  # noqa: E402
from ufldv2_checkpoints import write_official_checkpoint

from edge_deploy.errors import CheckpointError
from edge_deploy.export.finite_weights import check_finite_weights


def test_a_checkpoint_with_nan_is_refused_naming_the_tensor(tmp_path) -> None:
    import torch

    checkpoint = write_official_checkpoint(tmp_path / "ufld.pth", "tusimple")
    saved = torch.load(checkpoint, weights_only=True)
    saved["model"]["module.cls.3.bias"][7] = float("nan")
    torch.save(saved, checkpoint)
    done = run_cli(tmp_path, "convert", "ufldv2", "--dataset", "tusimple", "--checkpoint", str(checkpoint),
                   "-o", str(tmp_path / "out"), "--target", "onnx", timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: checkpoint {checkpoint.resolve()} holds NaN in cls.3.bias (1 of "), done.stderr
    assert "use another checkpoint" in error and not (tmp_path / "out").exists()


@pytest.mark.parametrize("values, what", [([float("inf")], "inf"), ([float("nan"), float("-inf")], "NaN and inf")])
def test_inf_is_named_as_well_buffers_included(values, what) -> None:
    import torch

    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    check_finite_weights(module, None)  # finite: nothing to say
    module[1].running_var[: len(values)] = torch.tensor(values)
    with pytest.raises(CheckpointError, match=f"the model's weights hold {what} in 1.running_var \\({len(values)} of 3"):
        check_finite_weights(module, None)
