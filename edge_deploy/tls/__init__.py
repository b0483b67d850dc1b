"""Mutual TLS: what a connection presents and what a refused handshake means (config.py: TLSConfig, which the
client and serve's own admin calls use) and the vehicle CA that issues and rotates the files (certs.py,
`edge-deploy certs`; needs `cryptography`, imported where used)."""
from .config import TLSConfig

__all__ = ["TLSConfig"]
