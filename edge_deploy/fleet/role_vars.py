"""The role variables `rollout -e` and `fleet status -e` pass to every host, parsed and checked once.

Ansible's own KEY=VALUE form gives strings only, so `-e 'edge_deploy_install_args=["--fp16"]'` would
reach the role as a string and fail on each host with a raw template error. Here a VALUE that starts
with `[` or `{` is read as JSON, and the role's list and mapping variables must be given as such.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TypeAlias

from ..core.bounded_read import read_regular
from ..errors import brief, one_line
from ..core.json_record import JsonObject
from .policy import FleetError

MAX_VARS_FILE_BYTES = 1 << 20  # an extra-vars file: a few variables of the role

# Ansible's extra vars: any variable of the role (roles/edge_deploy/defaults/main.yml, or Ansible's own) by name,
# JSON handed to ansible-playbook as it is. Only the few checked here are read; the role owns the rest.
RoleVars: TypeAlias = JsonObject

# The role's variables whose defaults (roles/edge_deploy/defaults/main.yml) are lists or mappings.
LIST_VARS = ("edge_deploy_command", "edge_deploy_install_args")
MAPPING_VARS = ("edge_deploy_environment",)


def parse_extra_vars(items: list[str] | None) -> RoleVars:
    """KEY=VALUE, a JSON object, or @FILE holding one, merged in order; FleetError for what is neither.

    The result is Ansible's extra vars (external JSON for the playbook: any variable of the role)."""
    out: RoleVars = {}
    for item in items or []:
        try:
            if item.startswith("@"):  # a regular file (a FIFO would block), of at most MAX_VARS_FILE_BYTES
                text = read_regular(Path(item[1:]), "--extra-vars file", FleetError, "pass @FILE holding a JSON object",
                                    MAX_VARS_FILE_BYTES)
                out.update(_object(json.loads(text)))
            elif item.lstrip().startswith("{"):
                out.update(_object(json.loads(item)))
            else:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise ValueError("not KEY=VALUE")
                out[key] = json.loads(value) if value.lstrip()[:1] in ("[", "{") else value
        except RecursionError:  # json nests by recursion: "[[[[..." deeper than Python's stack
            raise FleetError(f"--extra-vars {brief(item)} nests deeper than {sys.getrecursionlimit()} levels; pass a "
                             "flat JSON object.") from None
        except (OSError, ValueError) as exc:
            raise FleetError(f"--extra-vars {brief(item)} is not KEY=VALUE, a JSON object or @FILE with one "
                             f"({one_line(exc, 120)}).") from exc
    check_role_vars(out)
    return out


def check_role_vars(variables: RoleVars) -> None:
    """FleetError naming the first list or mapping variable of the role given as something else."""
    for key, kind, example in [*((k, list, '["--fp16"]') for k in LIST_VARS),
                               *((k, dict, '{"EDGE_DEPLOY_STATE_DIR": "/var/lib/lanes"}') for k in MAPPING_VARS)]:
        if key in variables and not isinstance(variables[key], kind):
            what = "a list" if kind is list else "a mapping"
            raise FleetError(f"--extra-vars {key} must be {what}, not {variables[key]!r}; give it as JSON, "
                             f"e.g. -e '{key}={example}'.")


def _object(value: Any) -> RoleVars:
    """A JSON object of extra vars, or ValueError."""
    if not isinstance(value, dict):
        raise ValueError("the JSON is not an object")
    return value
