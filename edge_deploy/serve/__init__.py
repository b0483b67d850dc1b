"""Serving: tritonserver discovery and command line (tritonserver), every admin call (admin), server records (record), the systemd unit (systemd) and the foreground run (foreground)."""
