"""Rolling a verified artifact out to a fleet of vehicles with Ansible (docs/design.md, "Fleet").

The controller side (`rollout.py`, `policy.py`, `inventory.py`, `ansible.py`, `payload.py`) runs
`ansible-playbook` with the role shipped in `ansible/roles/edge_deploy`, batch by batch; the
device side (`device.py`, `smoke.py`) is what the role runs on each vehicle through the CLI.
"""
