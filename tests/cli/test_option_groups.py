"""Issue 47 item 4: every command takes one typed options object; the option groups more than one command takes (the
client's TLS files, the decode parameters, the precision) are defined once, in cli/option_groups.py, and reach the
library whole; `serve` and `install` take the fields of the library's own ServeOptions / InstallOptions."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cli_process import run_cli
import typer.main

from edge_deploy.tls.certs import CertificateAuthority
from edge_deploy.cli import app
from edge_deploy.cli.bench import BenchOptions
from edge_deploy.cli.evaluate import EvaluateOptions
from edge_deploy.cli.infer import InferOptions
from edge_deploy.cli.options import Only, takes_fields
from edge_deploy.cli.repository import install_options
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.artifact.precision import Precision
from edge_deploy.serve.service import ServeOptions

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "format1" / "tiny_fp16"


def _command(name: str):  # noqa: ANN202
    return typer.main.get_command(app).commands[name]


def _params(name: str, args: list[str]) -> dict:
    """What the command line `edge-deploy NAME ARGS` gives the command (parsed as the command parses it). A path
    option's str becomes a Path as typer makes it before calling the command: typer 0.15 (the lowest version, in
    the Python 3.10 run) does that after click's parsing, newer typers in it."""
    command = _command(name)
    params = command.make_context(name, list(args)).params
    paths = {p.name for p in command.params if getattr(getattr(p, "type", None), "name", None) == "path"}  # click.Path
    return {key: Path(value) if key in paths and isinstance(value, str) else value for key, value in params.items()}


@pytest.fixture(scope="module")
def client_files(tmp_path_factory) -> tuple[Path, Path, Path]:
    ca = CertificateAuthority(tmp_path_factory.mktemp("tls"))
    ca.init(dns=["orin-lane"], ips=["127.0.0.1"])
    ca.issue("lane-consumer")
    return ca.ca_cert, ca.cert_path("lane-consumer"), ca.key_path("lane-consumer")


def test_the_tls_group_reaches_each_client_whole(client_files, tmp_path, monkeypatch) -> None:
    """infer, evaluate and bench: --tls-ca/--tls-cert/--tls-key become one TLSConfig with the three files."""
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))  # no server record found for --url
    ca, cert, key = client_files
    tls = {"tls_ca": ca, "tls_cert": cert, "tls_key": key}
    made = [
        InferOptions(images=["a.png"], wait=5.0, **tls).client().tls,  # wait: not dialed here
        EvaluateOptions(model="grpc://127.0.0.1:1/lanedet", **tls).tls(),
        BenchOptions(url="127.0.0.1:1", **tls).config().tls,
    ]
    for config in made:
        assert (config.ca, config.cert, config.key) == (ca, cert, key)
    assert EvaluateOptions(model="art").tls() is None and BenchOptions(url="127.0.0.1:1").config().tls is None


@pytest.mark.parametrize("name", ["infer", "evaluate", "bench", "health"])
def test_the_tls_options_read_the_same_everywhere(name: str) -> None:
    helps = {p.name: p.help for p in _command(name).params if p.name.startswith("tls_")}
    assert helps["tls_ca"].startswith("Connect over TLS: the CA that signed the server's certificate")
    assert helps["tls_cert"] == "This client's certificate (for a mutual-TLS server)."
    assert helps["tls_key"] == "Its private key."


def test_the_decode_group_keeps_each_commands_meaning() -> None:
    infer = {p.name: p for p in _command("infer").params}
    convert = {p.name: p for p in _command("convert").params}
    takes_conf, takes_top_k = " Takes a score threshold in [0, 1].", " Takes a whole number of lanes in [1, 1000]."
    assert infer["conf"].help == "Score threshold." + takes_conf
    assert infer["top_k"].help == "At most this many lanes." + takes_top_k
    assert convert["conf"].help == "Score threshold (default: the family's for the data set)." + takes_conf
    assert convert["top_k"].help == ("At most this many lanes (default: the family's for the data set): as many as "
                                     "your roads have." + takes_top_k)
    assert "pixels at the model's input width" in convert["nms"].help and "640 wide" in infer["nms"].help


@pytest.mark.parametrize("args, precision", [
    ([], None),
    (["--precision", "fp16"], Precision.FP16),
    (["--precision=fp32"], Precision.FP32),
    (["--fp16"], Precision.FP16),  # the spelling before --precision: the same parser
    (["--no-fp16"], Precision.FP32),
    (["--fp16", "--no-fp16"], Precision.FP32),  # the last one counts, as before
])
def test_install_takes_one_precision_vocabulary(args: list[str], precision: Precision | None) -> None:
    options = install_options(_params("install", [str(TINY), *args]))
    assert isinstance(options, InstallOptions) and options.precision is precision


def test_install_precision_is_convert_s_choice_less_what_install_cannot_serve() -> None:
    install = {p.name: p for p in _command("install").params}
    convert = {p.name: p for p in _command("convert").params}
    assert "fp16" not in install  # the alias is not an option of its own: --help shows --precision
    assert "--fp16 and --no-fp16 still mean fp16 and fp32" in install["precision"].help

    def choices(param) -> list[str]:  # noqa: ANN001
        kind = getattr(param, "type", None) or getattr(param, "type_descriptor", None)
        return [getattr(c, "value", c) for c in kind.choices]

    assert choices(install["precision"]) == ["fp16", "fp32"]
    assert choices(convert["precision"]) == ["fp16", "fp32", "int8"]


def test_install_refuses_int8_in_one_line_with_the_usage_exit_code() -> None:
    proc = run_cli(["install", str(TINY), "--precision", "int8"], timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "'int8'" in proc.stderr


def test_install_options_carry_every_option(tmp_path) -> None:
    args = [str(TINY), "-r", str(tmp_path / "repo"), "--name", "lane", "--runtime", "python", "--pipeline", "bls",
            "--max-queue-delay-us", "100", "--instances", "2", "--warmup", "--keep", "3", "--force",
            "--tritonserver", "/opt/tritonserver/bin/tritonserver", "--precision", "fp32"]
    options = install_options(_params("install", args))
    assert options == InstallOptions(TINY, tmp_path / "repo", "lane", runtime="python", pipeline="bls",
                                     max_queue_delay_us=100, instances=2, warmup=True, keep=3, force=True,
                                     tritonserver=Path("/opt/tritonserver/bin/tritonserver"), precision=Precision.FP32)
    assert install_options(_params("install", [str(TINY), "--no-pipeline"])).pipeline is False
    assert install_options(_params("install", [str(TINY), "--pipeline"])).pipeline == "ensemble"


def test_serve_takes_the_fields_of_serve_options() -> None:
    names = [p.name for p in _command("serve").params]
    fields = [f.name for f in dataclasses.fields(ServeOptions) if f.init]
    assert names == [*fields[:4], "uninstall", *fields[4:]]
    given = _params("serve", ["--repository", "repo", "--user", "--grpc-address", "0.0.0.0", "--grpc-port", "9001",
                              "--http", "--http-port", "9000", "--metrics", "--metrics-port", "9002", "--wait", "7",
                              "--exit-timeout", "5", "--log-verbose", "1", "--log-file", "/tmp/t.log",
                              "--log-max-size", "1M", "--tls-cert", "s.pem", "--tls-key", "s.key", "--tls-ca", "ca.pem",
                              "--tls-client-cert", "c.pem", "--tls-client-key", "c.key", "--allow-from",
                              "10.0.0.0/8", "--allow-from", "192.168.0.0/16", "--insecure", "--verbose",
                              "--tritonserver", "/bin/true", "--foreground", "--print-unit"])
    given.pop("uninstall")
    options = ServeOptions(**given)
    assert options == ServeOptions(
        repository=Path("repo"), user=True, foreground=True, print_unit=True, tritonserver=Path("/bin/true"),
        grpc_address="0.0.0.0", grpc_port=9001, http=True, http_port=9000, metrics=True, metrics_port=9002, wait=7,
        exit_timeout=5, log_verbose=1, log_file=Path("/tmp/t.log"), log_max_size="1M", tls_cert=Path("s.pem"),
        tls_key=Path("s.key"), tls_ca=Path("ca.pem"), tls_client_cert=Path("c.pem"), tls_client_key=Path("c.key"),
        allow_from=("10.0.0.0/8", "192.168.0.0/16"), insecure=True, verbose=True)
    defaults = _params("serve", [])
    defaults.pop("uninstall")
    assert ServeOptions(**defaults) == ServeOptions()


def test_a_library_field_without_its_option_is_refused_at_import() -> None:
    @dataclasses.dataclass(frozen=True)
    class Asked:
        port: int = 1
        host: str = "h"

    with pytest.raises(TypeError, match="no command-line parameter for host"):
        takes_fields(Asked, {"port": typer.Option()})
    with pytest.raises(TypeError, match="has no field extra"):
        takes_fields(Asked, {"port": typer.Option(), "host": typer.Option(), "extra": typer.Option()})
    takes_fields(Asked, {"port": typer.Option(), "host": typer.Option(), "extra": Only(bool, False)})


def test_the_old_spelling_installs_what_it_did(tmp_path) -> None:
    """`install ART --no-fp16`, as the fleet role's edge_deploy_install_args may still say: the FP32 file serves."""
    import json

    proc = run_cli(["install", str(TINY), "-r", str(tmp_path / "repo"), "--name", "lane", "--runtime", "python",
                    "--no-fp16"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    options = json.loads((tmp_path / "repo" / "lane" / "1" / "install.json").read_text())["options"]
    assert options["precision"] == "fp32" and options["fp16"] is False
