"""The Triton model repository, files only (it knows no server; edge_deploy.deploy has one load what it writes):
a new version (new_version), pruning (prune), pinning a config (pinning), what each version did (history), the read
side (versions), atomic staging and the lock (files), config.pbtxt (model_config), and the Python-backend models
(triton_models)."""
