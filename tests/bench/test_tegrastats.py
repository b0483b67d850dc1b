"""The tegrastats parser on recorded lines, a double for the binary: this machine is not a Jetson, so
/usr/bin/tegrastats is not here. The lines follow the format of NVIDIA's Jetson Linux developer guide
("tegrastats Utility"): Orin's GR3D_FREQ X%@[f,f] with NAME cur/avg mW rails, and the older X%@f with rails
without a unit."""
from __future__ import annotations

import os
import stat

from edge_deploy.bench.jetson import JetsonMonitor, parse_tegrastats, summarize

ORIN = ("11-25-2026 20:43:00 RAM 2448/30536MB (lfb 6355x4MB) SWAP 0/15268MB (cached 0MB) "
        "CPU [2%@729,0%@729,1%@729,0%@729,off,off,off,off] EMC_FREQ 0%@2133 GR3D_FREQ 37%@[305,305] "
        "VIC_FREQ 729 APE 174 CV0@-256C CPU@47.75C SOC2@44.5C GPU@-256C tj@47.75C "
        "VDD_GPU_SOC 2793mW/2793mW VDD_CPU_CV 397mW/397mW VIN_SYS_5V0 3032mW/3032mW")
XAVIER = ("RAM 3118/7765MB (lfb 24x4MB) SWAP 0/3882MB (cached 0MB) CPU [9%@1190,6%@1190] EMC_FREQ 0% "
          "GR3D_FREQ 12%@1377 APE 150 MTS fg 0% bg 0% AO@36.5C GPU@36C POM_5V_IN 4048/4048 POM_5V_GPU 82/82")


def test_orin_line() -> None:
    sample = parse_tegrastats(ORIN)
    assert sample.gpu_percent == 37.0
    assert sample.power_mw == {"VDD_GPU_SOC": 2793, "VDD_CPU_CV": 397, "VIN_SYS_5V0": 3032}


def test_older_line_without_units() -> None:
    sample = parse_tegrastats(XAVIER)
    assert sample.gpu_percent == 12.0
    assert sample.power_mw == {"POM_5V_IN": 4048, "POM_5V_GPU": 82}


def test_summary_means_and_board_total() -> None:
    load = summarize("tegrastats", [parse_tegrastats(ORIN), parse_tegrastats(ORIN.replace("37%", "63%")
                                                                               .replace("3032mW/", "4032mW/"))])
    assert load.samples == 2 and load.gpu_percent == 50.0
    assert load.total_mw == 3532.0  # VIN_SYS_5V0, the board's input, not the sum of the rails


def test_monitor_reads_a_tegrastats_binary(tmp_path) -> None:
    fake = tmp_path / "tegrastats"  # prints the recorded Orin line until stopped, as the real one does
    fake.write_text(f"#!/bin/sh\nwhile true; do echo '{ORIN}'; sleep 0.05; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monitor = JetsonMonitor(tegrastats=fake)
    assert monitor.available and monitor.source == "tegrastats"
    monitor.start()
    import time

    time.sleep(0.4)
    load = monitor.stop()
    assert load is not None and load.samples >= 2 and load.gpu_percent == 37.0
    assert os.path.basename(str(monitor.tegrastats)) == "tegrastats"


def test_no_jetson_says_so(monkeypatch) -> None:
    import edge_deploy.bench.jetson as jetson

    monkeypatch.setattr(jetson, "TEGRASTATS", jetson.Path("/nonexistent/tegrastats"))
    monkeypatch.setattr(jetson.shutil, "which", lambda name: None)
    monkeypatch.setattr(jetson, "_jtop_available", lambda: False)
    monitor = JetsonMonitor()
    assert not monitor.available and monitor.stop() is None
    assert "neither tegrastats nor jtop" in monitor.why
