"""The one tritonserver command line (the systemd unit's and `serve --foreground`'s) and its model-repository key."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from ..tls.config import TLSConfig
from .discovery import TritonInstall

DEFAULT_GRPC_PORT = 8001


@dataclass(frozen=True)
class ServerTLS:
    """TLS of the gRPC endpoint (PEM files) and the client identity edge-deploy itself dials it with.

    cert/key: the server's certificate and key; ca: the CA that signed the clients' certificates (and,
    as `edge-deploy certs` makes them, the server's). mutual: refuse clients without a certificate
    signed by `ca` (tritonserver --grpc-use-ssl-mutual). client_cert/client_key: what health checks
    and model loads present (`edge-deploy certs` issues one named edge-deploy).
    """

    cert: Path
    key: Path
    ca: Path
    mutual: bool = True
    client_cert: Path | None = None
    client_key: Path | None = None

    def client(self) -> TLSConfig:
        """The TLSConfig edge-deploy's own admin calls use."""
        return TLSConfig(ca=self.ca, cert=self.client_cert, key=self.client_key)

    def files(self) -> dict[str, Path]:
        """role -> file, for copying and checking."""
        found = {"server-cert": self.cert, "server-key": self.key, "ca": self.ca}
        if self.client_cert is not None and self.client_key is not None:
            found.update({"client-cert": self.client_cert, "client-key": self.client_key})
        return found


@dataclass
class ServerOptions:
    """How tritonserver is launched; `tritonserver_argv` turns this into a command line."""

    model_repository: Path
    grpc_address: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http: bool = False
    http_address: str = "127.0.0.1"
    http_port: int = 8000
    metrics: bool = False
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 8002
    model_control: str = "explicit"  # explicit | poll | none
    load_models: tuple[str, ...] = ("*",)
    repository_poll_secs: int = 2
    restricted_key: tuple[str, str] | None = None  # (key name, value) guarding the model-repository protocol
    strict_readiness: bool = True
    exit_on_error: bool = True  # False (`serve`): start with the models that load; the failed ones are named
    exit_timeout: int = 30
    log_verbose: int = 0
    tls: ServerTLS | None = None  # None: plaintext gRPC (loopback, or `serve --insecure`)
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """The gRPC address clients dial (host:port)."""
        return f"{self.grpc_address}:{self.grpc_port}"

    def ports(self) -> list[tuple[str, str, int]]:
        """(what, address, port) for every port this server will listen on."""
        ports = [("gRPC", self.grpc_address, self.grpc_port)]
        if self.http:
            ports.append(("HTTP", self.http_address, self.http_port))
        if self.metrics:
            ports.append(("metrics", self.metrics_address, self.metrics_port))
        return ports


def tritonserver_argv(install: TritonInstall, options: ServerOptions) -> list[str]:
    """The one command line used by the systemd unit and by --foreground."""
    argv = [
        str(install.binary),
        f"--model-repository={options.model_repository}",
        f"--grpc-address={options.grpc_address}",
        f"--grpc-port={options.grpc_port}",
        f"--allow-http={'true' if options.http else 'false'}",
        f"--allow-metrics={'true' if options.metrics else 'false'}",
        f"--model-control-mode={options.model_control}",
        f"--strict-readiness={'true' if options.strict_readiness else 'false'}",
        f"--exit-timeout-secs={options.exit_timeout}",
        f"--log-verbose={options.log_verbose}",
    ]
    if not options.exit_on_error:
        argv.append("--exit-on-error=false")  # a model that fails to load must not keep the others from serving
    if install.backend_dir is not None:
        argv.append(f"--backend-directory={install.backend_dir}")
    if options.http:
        argv += [f"--http-address={options.http_address}", f"--http-port={options.http_port}"]
    if options.metrics:
        argv += [f"--metrics-address={options.metrics_address}", f"--metrics-port={options.metrics_port}"]
    if options.model_control == "explicit":
        argv += [f"--load-model={name}" for name in options.load_models]
    elif options.model_control == "poll":
        argv.append(f"--repository-poll-secs={options.repository_poll_secs}")
    if options.restricted_key is not None:
        # gRPC clients send the header `triton-grpc-protocol-<name>`, HTTP clients `<name>`.
        name, value = options.restricted_key
        argv.append(f"--grpc-restricted-protocol=model-repository:{name}={value}")
        # Only servers from 2.40 (r23.11) have it; older ones (JetPack 5's 2.34/2.35) would exit on it.
        if options.http and install.has_option("--http-restricted-api"):
            argv.append(f"--http-restricted-api=model-repository:{name}={value}")
    if options.tls is not None:
        # The same five options from 2.34/2.35 (JetPack 5) to 2.51: triton-inference-server/server
        # src/command_line_parser.cc (v2.34.0, v2.35.0, v2.51.0); --grpc-use-ssl-mutual implies --grpc-use-ssl.
        tls = options.tls
        argv.append("--grpc-use-ssl-mutual=true" if tls.mutual else "--grpc-use-ssl=true")
        argv += [f"--grpc-server-cert={tls.cert}", f"--grpc-server-key={tls.key}", f"--grpc-root-cert={tls.ca}"]
    argv += list(options.extra_args)
    return argv


# The model-repository key. tritonserver reads options only from its command line
# (getopt_long: no option file, no environment variable), so the value is visible in
# /proc/PID/cmdline to local users unless /proc is mounted with hidepid=invisible.
RESTRICTED_KEY_NAME = "edge-deploy-key"
GRPC_KEY_HEADER = f"triton-grpc-protocol-{RESTRICTED_KEY_NAME}"
KEY_ENV = "EDGE_DEPLOY_MODEL_KEY"


def generate_key() -> str:
    """A fresh random model-repository key (hex, safe in argv and environment files)."""
    return secrets.token_hex(32)
