"""Issue 34 item 10: NaN or inf in a checkpoint's weights is named before the export (it was blamed on parity:
"differs by inf ...; the export does not reproduce the model")."""
from __future__ import annotations

import pytest
from triton_helpers import run_cli
from ufldv2_checkpoints import write_official_checkpoint


@pytest.mark.parametrize("value, what", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_a_checkpoint_with_nan_or_inf_is_refused_naming_the_tensor(tmp_path, value, what) -> None:
    import torch

    checkpoint = write_official_checkpoint(tmp_path / "ufld.pth", "tusimple")
    saved = torch.load(checkpoint, weights_only=True)
    saved["model"]["module.cls.3.bias"][7] = value
    torch.save(saved, checkpoint)
    done = run_cli(tmp_path, "convert", "ufldv2", "--dataset", "tusimple", "--checkpoint", str(checkpoint),
                   "-o", str(tmp_path / "out"), "--target", "onnx", timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: checkpoint {checkpoint.resolve()} holds {what} in cls.3.bias (1 of "), done.stderr
    assert "use another checkpoint" in error and not (tmp_path / "out").exists()
