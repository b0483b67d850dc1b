"""A shared memory region that cannot be made (/dev/shm full or limited) is a one-line ClientError naming what to
do, not an internal error. The limit is a real one: RLIMIT_FSIZE in a child process makes the region's ftruncate
fail as a full /dev/shm would (with SIGXFSZ ignored, as a process that handles it does)."""
from __future__ import annotations

import subprocess
import sys

MAKE_REGION = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
from edge_deploy.client.shm import ShmRegion, leftover_regions
from edge_deploy.errors import ClientError
try:
    ShmRegion(8 << 20, "input")
except ClientError as exc:
    print(type(exc).__name__, exc)
import os
print("left", len(leftover_regions(os.getpid())))
"""


def test_a_region_that_cannot_be_made_is_one_line_with_what_to_do():
    """Plant the old bare `tshm.create_shared_memory_region(...)` in ShmRegion and tritonclient's
    SharedMemoryException reaches the app (the CLI: exit 70, "internal error")."""
    result = subprocess.run([sys.executable, "-c", MAKE_REGION], capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 2, (result.stdout, result.stderr[-2000:])
    assert lines[0].startswith("ClientError cannot make a 8388608-byte shared memory region in /dev/shm"), lines[0]
    assert "transport='grpc'" in lines[0]
    assert lines[1] == "left 0"  # nothing half-made is left in /dev/shm
