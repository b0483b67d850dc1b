"""Which tritonserver releases fit a Jetson's JetPack, with where that is written.

Triton for Jetson comes from the GitHub release page of triton-inference-server/server (tarballs)
or from NGC (containers); which one fits follows the L4T release (/etc/nv_tegra_release). Triton
26.02 (2.66.0) is the last release with Jetson artifacts on GitHub: 26.03 publishes none, and
Jetson AGX is served by the SBSA (arm64) container from then on. docs/install.md has the table.
"""
from __future__ import annotations

from dataclasses import dataclass

LAST_GITHUB_JETSON = (2, 66)  # Triton 26.02
LAST_GITHUB_JETSON_NOTE = (
    "Triton 26.02 (2.66.0) is the last release with Jetson artifacts on GitHub; 26.03 publishes none and serves "
    "Jetson AGX with the SBSA (arm64) container "
    "(https://github.com/triton-inference-server/server/releases/tag/v2.66.0, .../tag/v2.67.0)"
)
_JETSON_CONTAINERS = "https://github.com/dusty-nv/jetson-containers/blob/master/packages/ml/triton/config.py"


@dataclass(frozen=True)
class TritonFit:
    """The tritonserver releases that fit one JetPack line."""

    jetpack: str  # "JetPack 5"
    fits: str  # what to install, one sentence
    source: str  # where that is written
    supported: bool = True  # False: edge-deploy's plans need a newer TensorRT than this JetPack has
    igpu_builds: bool = True  # whether the -igpu (CUDA 12) builds run here
    max_release: tuple[int, int] | None = None  # newest release with artifacts for this line, when known

    def describe(self) -> str:
        return f"{self.jetpack}: {self.fits} (source: {self.source})"


_JETPACK4 = TritonFit(
    "JetPack 4.6", "tarballs up to tritonserver2.19.0-jetpack4.6.1.tgz (22.02); their TensorRT 8.0/8.2 is older "
    "than the 8.5 edge-deploy's plans need", _JETSON_CONTAINERS, supported=False, igpu_builds=False,
    max_release=(2, 19))
# JetPack 5.0 DP/5.0.1 DP (L4T R34) and 5.0.2 (R35.1) ship TensorRT 8.4: edge-deploy builds plans from 8.5
# (machine/tensorrt_api.py SUPPORTED), and TensorRT imports the fused preprocessing's cubic Resize from 8.5.
_TENSORRT_84 = ("not supported: its TensorRT 8.4 is older than the 8.5 edge-deploy's plans need (and the fused "
                "preprocessing's cubic Resize needs 8.5); upgrade to JetPack 5.1 (L4T R35.2.1) or newer")
_JETPACK50_DP = TritonFit(
    "JetPack 5.0/5.0.1 DP (L4T R34)", f"the developer previews, {_TENSORRT_84}", _JETSON_CONTAINERS,
    supported=False, igpu_builds=False)
_JETPACK502 = TritonFit(
    "JetPack 5.0.2 (L4T R35.1)", f"tarballs up to tritonserver2.27.0-jetpack5.0.2.tgz (22.10), {_TENSORRT_84}",
    _JETSON_CONTAINERS, supported=False, igpu_builds=False, max_release=(2, 27))
_JETPACK5 = {
    "35.2": "tritonserver2.34.0-jetpack5.1.tgz (23.05)",
}
_JETPACK5_LATEST = ("tritonserver2.35.0-jetpack5.1.2-update-1.tgz (23.06, the newest JetPack 5 tarball; it uses "
                    "JetPack's TensorRT 8.5)")
_JETPACK6 = TritonFit(
    "JetPack 6", "the tritonserver2.XX.0-igpu.tar(.gz) tarballs (from 2.40.0, 23.11) or the NGC container "
    "nvcr.io/nvidia/tritonserver:YY.MM-py3-igpu, each built for the newest JetPack at its release: on JetPack 6 "
    "(Ubuntu 22.04) 2.49.0 (24.08) runs, 2.52.0-igpu needs glibc 2.36 and does not start on JetPack 6.2.1",
    f"{_JETSON_CONTAINERS}; https://github.com/triton-inference-server/server/releases/tag/v2.40.0; "
    "https://github.com/triton-inference-server/server/issues/8367", max_release=LAST_GITHUB_JETSON)
_JETPACK7 = TritonFit(
    "JetPack 7", "the aarch64 -agx tarballs (tritonserver2.60.0-agx.tar onwards, up to 2.66.0 = 26.02), then the "
    "SBSA (arm64) NGC container from 26.03; the 25.08 -igpu container is CUDA 12 and does not fit JetPack 7's "
    "CUDA 13", "https://github.com/triton-inference-server/server/releases/tag/v2.67.0; "
    "https://github.com/triton-inference-server/server/issues/8412", igpu_builds=False,
    max_release=LAST_GITHUB_JETSON)


def triton_for_l4t(l4t: str | None) -> TritonFit | None:
    """The Triton releases for the L4T release `l4t` ('36.4.0'); None off a Jetson or for an unknown line."""
    if not l4t:
        return None
    parts = l4t.split(".")
    major = parts[0]
    if major == "32":
        return _JETPACK4
    minor = ".".join(parts[:2])
    if major == "34":
        return _JETPACK50_DP
    if minor == "35.1":
        return _JETPACK502
    if major == "35":
        fits = _JETPACK5.get(minor, _JETPACK5_LATEST)
        return TritonFit("JetPack 5", f"{fits}; the -igpu builds (2.40.0 on) need CUDA 12, i.e. JetPack 6",
                         f"{_JETSON_CONTAINERS}; https://github.com/triton-inference-server/server/issues/6844",
                         igpu_builds=False, max_release=(2, 35))
    if major == "36":
        return _JETPACK6
    if major in ("38", "39"):
        return _JETPACK7
    return None


def release_warning(fit: TritonFit, release: tuple[int, ...] | None) -> str | None:
    """Why the found tritonserver's release does not fit this JetPack line (None: it fits or is unknown)."""
    if release is None or fit.max_release is None:
        return None
    if tuple(release[:2]) > fit.max_release:
        if fit.max_release == LAST_GITHUB_JETSON:
            return (f"tritonserver {'.'.join(map(str, release))} is newer than 2.66.0 (26.02), the last release with "
                    "Jetson artifacts on GitHub: it is not a Jetson build")
        return (f"tritonserver {'.'.join(map(str, release))} is newer than the newest build for {fit.jetpack} "
                f"({'.'.join(map(str, fit.max_release))}): {fit.fits}")
    return None
