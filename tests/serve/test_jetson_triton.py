"""Which tritonserver releases fit the detected JetPack, as doctor says it on fake Jetson roots
(tests/data/jetson_root: real-looking /etc/nv_tegra_release of JetPack 5.1.2, 6.0 and 6.2), with its sources,
and the warning for a tritonserver no build for that JetPack has (a fake install: bin/tritonserver and the
TRITON_VERSION file Triton's tarballs carry)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_deploy.deploy import doctor
from edge_deploy.serve.jetson_triton import LAST_GITHUB_JETSON, release_warning, triton_for_l4t

pytest_plugins = ["jetson_fixtures"]  # board, no_tensorrt


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch, no_tensorrt):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITONSERVER", raising=False)


def fake_release(tmp_path: Path, release: str) -> Path:
    install = tmp_path / f"triton-{release}"
    (install / "bin").mkdir(parents=True)
    (install / "backends" / "python").mkdir(parents=True)
    (install / "TRITON_VERSION").write_text(release + "\n")
    binary = install / "bin" / "tritonserver"
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(0o755)
    return binary


def rows(root: Path) -> list[doctor.Check]:
    return [c for c in doctor.run_checks(root) if c.name == "Triton for JetPack"]


def test_each_jetpack_line_has_its_builds_and_sources() -> None:
    jp5 = triton_for_l4t("35.4.1")
    assert "tritonserver2.35.0-jetpack5.1.2-update-1.tgz" in jp5.fits and not jp5.igpu_builds
    assert "jetson-containers" in jp5.source and "issues/6844" in jp5.source
    assert "tritonserver2.34.0-jetpack5.1.tgz" in triton_for_l4t("35.2.1").fits
    jp6 = triton_for_l4t("36.4.0")
    assert "-igpu" in jp6.fits and "2.49.0" in jp6.fits and "releases/tag/v2.40.0" in jp6.source
    jp7 = triton_for_l4t("38.2.0")
    assert "-agx" in jp7.fits and "SBSA" in jp7.fits and "releases/tag/v2.67.0" in jp7.source
    assert not triton_for_l4t("32.7.1").supported  # TensorRT 8.2: older than the plans need
    assert triton_for_l4t(None) is None and triton_for_l4t("40.0.0") is None
    assert LAST_GITHUB_JETSON == (2, 66)


def test_a_release_newer_than_any_build_for_the_jetpack_is_named() -> None:
    assert "newest build for JetPack 5" in release_warning(triton_for_l4t("35.4.1"), (2, 49, 0))
    assert release_warning(triton_for_l4t("35.4.1"), (2, 35, 0)) is None
    assert "26.02" in release_warning(triton_for_l4t("36.3.0"), (2, 67, 0))
    assert release_warning(triton_for_l4t("36.3.0"), (2, 49, 0)) is None
    assert release_warning(triton_for_l4t("36.3.0"), None) is None


def test_doctor_says_which_triton_fits_this_jetpack_and_where_that_is_written(board, tmp_path, monkeypatch) -> None:
    (jp5,) = rows(board("agx_orin_jp512"))  # L4T R35.4.1
    assert jp5.status == "ok" and "tritonserver2.35.0-jetpack5.1.2-update-1.tgz" in jp5.detail
    assert "jetson-containers" in jp5.detail and "releases/tag/v2.66.0" in jp5.detail  # the 26.02 note, cited
    (jp6,) = rows(board("agx_orin_jp60"))
    assert "-igpu" in jp6.detail
    assert rows(board("x86_desktop")) == []  # not a Jetson: no row

    monkeypatch.setenv("TRITONSERVER", str(fake_release(tmp_path, "2.49.0")))  # an -igpu (JetPack 6) release
    detail = [c.detail for c in rows(board("agx_orin_jp512"))]
    assert len(detail) == 2 and "tritonserver 2.49.0 is newer than the newest build for JetPack 5" in detail[1]
    monkeypatch.setenv("TRITONSERVER", str(fake_release(tmp_path, "2.67.0")))
    warned = [c for c in rows(board("agx_orin_jp60")) if c.status == "warn"]
    assert len(warned) == 1 and "not a Jetson build" in warned[0].detail


def test_jetpack_7_gets_the_agx_builds(board) -> None:
    root = board("agx_orin_jp60")
    release = root / "etc" / "nv_tegra_release"
    release.write_text(release.read_text().replace("# R36 (release), REVISION: 3.0", "# R38 (release), REVISION: 2.0"))
    (row,) = rows(root)
    assert "JetPack 7" in row.detail and "tritonserver2.60.0-agx.tar" in row.detail


def test_jetpack_5_before_5_1_is_not_supported_and_doctor_says_why(board) -> None:
    # TensorRT 8.4 (JetPack 5.0 DP/5.0.1 DP on L4T R34, 5.0.2 on R35.1) is below machine/tensorrt_api.py's SUPPORTED
    # 8.5, where the fused preprocessing's cubic Resize also starts.
    for l4t, jetpack in (("35.1.0", "JetPack 5.0.2"), ("34.1.1", "JetPack 5.0/5.0.1 DP")):
        fit = triton_for_l4t(l4t)
        assert not fit.supported and fit.jetpack.startswith(jetpack), (l4t, fit)
        assert "not supported: its TensorRT 8.4 is older than the 8.5" in fit.fits and "JetPack 5.1" in fit.fits
        assert "2.35.0" not in fit.fits  # not the JetPack 5.1.2 tarball
    assert "tritonserver2.27.0-jetpack5.0.2.tgz" in triton_for_l4t("35.1.0").fits
    assert triton_for_l4t("35.2.1").supported and triton_for_l4t("35.4.1").supported

    root = board("agx_orin_jp512")
    release = root / "etc" / "nv_tegra_release"
    text = release.read_text()
    for revision, jetpack in (("# R35 (release), REVISION: 1.0", "JetPack 5.0.2"),
                              ("# R34 (release), REVISION: 1.1", "JetPack 5.0/5.0.1 DP")):
        release.write_text(text.replace("# R35 (release), REVISION: 4.1", revision))
        (row,) = rows(root)
        assert row.status == "warn" and row.detail.startswith(jetpack), row
        assert "not supported: its TensorRT 8.4 is older than the 8.5 edge-deploy's plans need" in row.detail
