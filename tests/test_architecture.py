"""The package's shape: no import cycles between its modules, the stages stay on their floors, and the client stands
apart from install/serve.

Read from the source with `ast` (nothing is imported, so no heavy package is needed).
Lazy imports inside functions count: a cycle through them is still a knot in the design.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "edge_deploy"
# Python-backend model files run inside Triton with their own imports (copied beside them).
STANDALONE = {"edge_deploy.repository.triton_models.onnx_runner", "edge_deploy.repository.triton_models.preprocess_model",
              "edge_deploy.repository.triton_models.postprocess_model"}


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {_module_name(p, package): p for p in package.rglob("*.py")}
    return {name: path for name, path in found.items() if name not in STANDALONE}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the edge_deploy modules it imports (at top level or inside functions)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


@functools.lru_cache(maxsize=1)
def package_graph() -> dict[str, set[str]]:
    """import_graph() of the package, read once for all the tests here (none changes it)."""
    return import_graph()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def unresolved_imports(package: Path = PACKAGE) -> list[str]:
    """Imports of an edge_deploy module that does not exist, as "importer -> missing" (import_graph drops them)."""
    modules = _modules(package)
    known = set(modules) | {name for name in (_module_name(p, package) for p in package.rglob("*.py"))}
    found = []
    for name, path in modules.items():
        base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == package.name):
                parts = base.split(".")[: len(base.split(".")) - node.level + 1] if node.level else []
                source = ".".join(parts + ([node.module] if node.module else []))
                if source not in known:
                    found.append(f"{name} -> {source}")
            elif isinstance(node, ast.Import):
                found += [f"{name} -> {a.name}" for a in node.names
                          if a.name.split(".")[0] == package.name and a.name not in known]
    return sorted(found)


def test_every_internal_import_names_a_module() -> None:
    """A module moved away leaves no import of its old path behind (the graph would silently drop that edge). Plant
    `from .synthetic import scene` in training/train.py and this fails."""
    assert unresolved_imports() == []


def test_the_graph_sees_relative_and_lazy_imports() -> None:
    graph = package_graph()
    assert "edge_deploy.errors" in graph["edge_deploy.client.base"]  # `from ..errors import ...`
    assert "edge_deploy.lanedet.laneatt.model" in graph["edge_deploy.lanedet.laneatt"]  # imported inside a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert cycles(package_graph()) == []


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the package's folders and root modules (edge_deploy.X): X imports Y when any module of X
    imports one of Y."""
    def folder(module: str) -> str:
        return ".".join(module.split(".")[:2])
    out: dict[str, set[str]] = {folder(m): set() for m in graph}
    for module, targets in graph.items():
        out[folder(module)] |= {folder(t) for t in targets if folder(t) != folder(module)}
    return out


def test_no_cycles_between_folders() -> None:
    """Folders stand on folders below them, never on each other both ways, even where no two modules form a cycle
    (plant: `from ..artifact.records import ExportReport` in lanedet/lane_family.py; artifact/manifest.py asks lanedet
    for the families, and this fails)."""
    assert cycles(folder_graph(package_graph())) == []
    assert cycles(folder_graph({"edge_deploy.a.x": {"edge_deploy.b.y"}, "edge_deploy.b.z": {"edge_deploy.a.w"},
                                "edge_deploy.a.w": set(), "edge_deploy.b.y": set()})) == [["edge_deploy.a",
                                                                                          "edge_deploy.b"]]


def test_client_imports_only_lanedet_geometry_detect_tls_and_errors() -> None:
    allowed = ("edge_deploy.client", "edge_deploy.lanedet", "edge_deploy.geometry", "edge_deploy.detect",
               "edge_deploy.tls.config", "edge_deploy.errors", "edge_deploy.core.numbers", "edge_deploy.core.json_record",
               "edge_deploy.runtime")
    graph = package_graph()
    offending = {
        module: sorted(t for t in targets if not t.startswith(allowed))
        for module, targets in graph.items() if module.startswith("edge_deploy.client")
    }
    assert {m: t for m, t in offending.items() if t} == {}


# The convert side of the families (what to convert, a family's own convert options) and the module that re-exports
# it for other packages' families: the client imports neither.
CONVERT_SIDE = ("edge_deploy.lanedet.source", "edge_deploy.lanedet.family")


def test_the_client_imports_no_convert_side_types() -> None:
    """Plant `from ..lanedet.source import SourceSpec` (or `from ..lanedet.family import ...`) in client/base.py, and
    this fails."""
    graph = import_graph()
    offending = {module: sorted(t for t in targets if t in CONVERT_SIDE)
                 for module, targets in graph.items() if _within(module, "edge_deploy.client")}
    assert {m: t for m, t in offending.items() if t} == {}


# Floors of the deploy stages: a stage imports only stages below it, at module top or inside a function. The
# repository writes versions and knows nothing of servers; serve runs servers and knows nothing of versions; deploy
# (install, rollback: write, have the server load, record) stands on both. What both need lies below both
# (core/triton_layout.py: Triton's repository rules; core/state.py: the state directory).
FORBIDDEN = {
    "edge_deploy.repository": ("edge_deploy.serve", "edge_deploy.deploy", "edge_deploy.cli", "edge_deploy.fleet"),
    "edge_deploy.serve": ("edge_deploy.repository", "edge_deploy.deploy", "edge_deploy.cli", "edge_deploy.fleet"),
    "edge_deploy.core.triton_layout": ("edge_deploy.repository", "edge_deploy.serve", "edge_deploy.deploy"),
    "edge_deploy.core.state": ("edge_deploy.repository", "edge_deploy.serve", "edge_deploy.deploy", "edge_deploy.tls.certs"),
    "edge_deploy.tls.certs": ("edge_deploy.repository", "edge_deploy.serve", "edge_deploy.deploy"),
    "edge_deploy.client": ("edge_deploy.repository", "edge_deploy.serve", "edge_deploy.deploy"),
}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a lower stage into one above it (FORBIDDEN), as "importer -> imported"."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  for lower, higher in FORBIDDEN.items() if _within(module, lower)
                  and any(_within(target, h) for h in higher))


def test_no_stage_imports_one_above_it() -> None:
    """Plant `from ..serve import admin` inside a function of repository/pinning.py, or `from ..repository.versions
    import versions` in one of serve/, and this fails."""
    assert upward_imports(package_graph()) == []


def test_the_floor_rule_sees_imports_inside_functions(tmp_path: Path) -> None:
    package = tmp_path / "edge_deploy"
    for folder in ("repository", "serve"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "serve" / "admin.py").write_text("")
    (package / "repository" / "late.py").write_text("def f():\n    from ..serve import admin\n    return admin\n")
    assert upward_imports(import_graph(package)) == ["edge_deploy.repository.late -> edge_deploy.serve.admin"]
    assert upward_imports({"edge_deploy.deploy.install": {"edge_deploy.serve.admin",
                                                          "edge_deploy.repository.files"}}) == []



# The shared floor: what more than one stage needs lies below all of them, outside every stage's folder: machine/
# (this machine's facts, the TensorRT API, whether a plan fits the machine and the manifest's I/O), core/, artifact/,
# tls/, synthetic/ and errors.py (and the libraries lanedet/ and geometry/). The repository and serve stand on that floor only.
STAGES = ("edge_deploy.export", "edge_deploy.engine", "edge_deploy.repository", "edge_deploy.serve",
          "edge_deploy.deploy", "edge_deploy.evaluate", "edge_deploy.bench", "edge_deploy.fleet", "edge_deploy.client",
          "edge_deploy.media", "edge_deploy.ros", "edge_deploy.cli", "edge_deploy.training", "edge_deploy.engine.convert",
          "edge_deploy.deploy.doctor")


def imports_into(graph: dict[str, set[str]], importers: tuple[str, ...], imported: tuple[str, ...]) -> list[str]:
    """Every import from a module of `importers` into one of `imported` that is not its own package, as
    "importer -> imported"."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  for own in importers if _within(module, own)
                  and any(_within(target, p) and not _within(target, own) for p in imported))


def test_repository_and_serve_import_no_stage_but_the_shared_floor() -> None:
    """Plant `from ..engine import plan` in repository/pinning.py (or `from ..export import settings` in one of
    serve/) and this fails."""
    graph = package_graph()
    assert all(any(_within(m, p) for m in graph) for p in STAGES)  # none renamed away
    assert imports_into(graph, ("edge_deploy.repository", "edge_deploy.serve"), STAGES) == []


def test_runtime_stands_on_errors_alone() -> None:
    """The threads' primitive (runtime/) is under the client and the streams: plant `from ..media import stream` in
    runtime/threads.py and this fails."""
    graph = package_graph()
    assert {t for m, targets in graph.items() if _within(m, "edge_deploy.runtime") for t in targets
            if not _within(t, "edge_deploy.runtime")} <= {"edge_deploy.errors"}


def test_serve_imports_nothing_of_the_client() -> None:
    """serve/ dials its own server with TLSConfig from tls/config.py, not from client/. Plant `from ..client import base` in
    serve/admin.py and this fails."""
    assert imports_into(package_graph(), ("edge_deploy.serve",), ("edge_deploy.client",)) == []


def test_no_stage_imports_training() -> None:
    """Training (the demo weights) is a user of the stages, never their dependency: the synthetic roads the stages
    check with are synthetic/roads.py. Plant `from ..training import train` in export/parity.py and this fails."""
    graph = package_graph()
    assert "edge_deploy.training.train" in graph
    assert imports_into(graph, tuple(m for m in graph if m != "edge_deploy"), ("edge_deploy.training",)) == []


def test_the_floor_rules_find_what_they_forbid() -> None:
    graph = {"edge_deploy.serve.admin": {"edge_deploy.client.base", "edge_deploy.tls.config", "edge_deploy.serve.server_record"},
             "edge_deploy.repository.late": {"edge_deploy.machine.plan_fit", "edge_deploy.engine.plan"},
             "edge_deploy.evaluate.datasets": {"edge_deploy.training.train", "edge_deploy.synthetic.roads"}}
    assert imports_into(graph, ("edge_deploy.repository", "edge_deploy.serve"), STAGES) == [
        "edge_deploy.repository.late -> edge_deploy.engine.plan", "edge_deploy.serve.admin -> edge_deploy.client.base"]
    assert imports_into(graph, ("edge_deploy.evaluate",), ("edge_deploy.training",)) == [
        "edge_deploy.evaluate.datasets -> edge_deploy.training.train"]

# What a vehicle app that imports the client must never load: training and the synthetic scene generator, the machine
# floor (TensorRT), and every stage that is not inference (export, engine, repository, serve, evaluate, fleet, the CLI, ...).
NOT_INFERENCE = ("edge_deploy.training", "edge_deploy.synthetic.roads", "edge_deploy.evaluate", "edge_deploy.export",
                 "edge_deploy.engine", "edge_deploy.machine", "edge_deploy.repository", "edge_deploy.serve", "edge_deploy.deploy", "edge_deploy.fleet",
                 "edge_deploy.cli", "edge_deploy.engine.convert", "edge_deploy.tls.certs", "edge_deploy.deploy.doctor",
                 "edge_deploy.export.parity", "edge_deploy.artifact.manifest")


def reachable(graph: dict[str, set[str]], roots: list[str]) -> dict[str, list[str]]:
    """Every module reachable from `roots` -> one import path to it (lazy imports included)."""
    paths = {root: [root] for root in roots}
    todo = list(roots)
    while todo:
        module = todo.pop()
        for nxt in sorted(graph[module]):
            if nxt not in paths:
                paths[nxt] = [*paths[module], nxt]
                todo.append(nxt)
    return paths


def test_the_client_never_reaches_training_or_the_other_stages() -> None:
    graph = package_graph()
    def outside(module: str) -> bool:  # edge_deploy.cli, not edge_deploy.client
        return any(module == p or module.startswith(p + ".") for p in NOT_INFERENCE)

    assert all(any(m == p or m.startswith(p + ".") for m in graph) for p in NOT_INFERENCE)  # none renamed away
    # the client, and the lane-model families the registry imports by name (lanedet/family.py) for it
    roots = [m for m in graph if m.startswith(("edge_deploy.client", "edge_deploy.lanedet", "edge_deploy.geometry"))]
    offending = {module: " -> ".join(path) for module, path in reachable(graph, roots).items()
                 if outside(module)}
    assert offending == {}
    assert reachable({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, ["a"]) == {
        "a": ["a"], "b": ["a", "b"], "c": ["a", "b", "c"]}


def test_lanedet_does_not_import_the_pipeline_stages() -> None:
    stages = ("edge_deploy.export", "edge_deploy.engine", "edge_deploy.repository", "edge_deploy.serve",
              "edge_deploy.deploy", "edge_deploy.client", "edge_deploy.cli", "edge_deploy.engine.convert")
    graph = package_graph()
    offending = {m: sorted(t for t in targets if t.startswith(stages))
                 for m, targets in graph.items() if m.startswith("edge_deploy.lanedet")}
    assert {m: t for m, t in offending.items() if t} == {}


# Where a family may be named: its own package, where families come from (entry_points.py: the built-in families and
# the legacy one) and lanedet/__init__.py (the public decoders, decode_lanes/decode_ufldv2/..., re-exported by name).
# training/ trains the demo's LaneATT weights: a user of that one family, not part of the seam between stages and
# families.
FAMILY_NAMING_ALLOWED = ("edge_deploy/lanedet/entry_points.py", "edge_deploy/lanedet/__init__.py",
                         "edge_deploy/training/")


def family_mentions(path: Path, names: set[str]) -> list[str]:
    """Where a module names one of `names` in code: a string literal (docstrings aside) containing it as a word, or an
    import of a module path with it as a part."""
    import re

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if set(re.findall(r"[a-z0-9]+", node.value.lower())) & names:
                found.append(f"line {node.lineno}: {node.value[:50]!r}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
            if any(set(module.split(".")) & names for module in modules):
                found.append(f"line {node.lineno}: import of {', '.join(m for m in modules if m)}")
    return found


def test_no_module_outside_a_familys_own_package_names_a_family() -> None:
    """A fourth family needs no change outside lanedet/<family>/ (and one registry line): every other module asks the
    registry. Plant `if family.name == "ufldv2":` in export/parity.py, or `from .lanedet.laneatt import ...` anywhere, and this
    fails."""
    family_dirs = [p for p in (PACKAGE / "lanedet").iterdir() if (p / "__init__.py").is_file()]
    names = {p.name for p in family_dirs}
    assert {"laneatt", "ufldv2"} <= names
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if any(rel.startswith(f"edge_deploy/lanedet/{name}/") for name in names) or rel.startswith(FAMILY_NAMING_ALLOWED):
            continue
        offenders += [f"{rel} {where}" for where in family_mentions(path, names)]
    assert not offenders, "modules naming a lane family outside its package: " + "; ".join(offenders)
