"""`edge-deploy NAME` imports only NAME's command module (edge_deploy/cli/__init__.py: MODULE_OF_COMMAND), and the
table behind it names the module that really registers each command, so no command is missing when run alone."""
from __future__ import annotations

import json
import subprocess
import sys

import edge_deploy.cli as cli


def last_line_of(script: str) -> tuple[object, str]:
    """Run `script` in a fresh interpreter (nothing imported yet); the JSON of its last line, and its output."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout


def test_every_command_is_registered_by_the_module_its_table_names() -> None:
    app = cli.app  # every command module imported
    registered = {info.name or info.callback.__name__: info.callback.__module__ for info in app.registered_commands}
    for group in app.registered_groups:
        modules = {info.callback.__module__ for info in group.typer_instance.registered_commands}
        assert len(modules) == 1, (group.name, modules)
        registered[group.name] = modules.pop()
    assert {name: f"edge_deploy.cli.{module}" for name, module in cli.MODULE_OF_COMMAND.items()} == registered


def test_a_command_run_alone_imports_only_its_own_command_module() -> None:
    script = (
        "import sys\n"
        "sys.argv = ['edge-deploy', 'fleet', 'report', '--help']\n"
        "from edge_deploy.cli import main\n"
        "try:\n    main()\nexcept SystemExit as done:\n    assert done.code == 0, done.code\n"
        "import json\n"
        "print(json.dumps(sorted({m.split('.')[2] for m in sys.modules if m.startswith('edge_deploy.cli.')})))\n"
    )
    loaded, output = last_line_of(script)
    assert isinstance(loaded, list) and "fleet" in loaded and "Usage" in output
    assert not set(loaded) & (set(cli.COMMAND_MODULES) - {"fleet"}), loaded


def test_the_help_lists_the_commands_in_the_tables_order_whichever_module_came_first() -> None:
    script = (
        "import edge_deploy.cli.serve, edge_deploy.cli.fleet, edge_deploy.cli.infer  # a test or a library first\n"
        "import json, typer\n"
        "from edge_deploy.cli import app\n"
        "print(json.dumps(list(typer.main.get_command(app).commands)))\n"
    )
    assert last_line_of(script)[0] == list(cli.MODULE_OF_COMMAND)
