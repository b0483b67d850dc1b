"""Deploying to a running server: install (write a version, have the server load it, record what serves), rollback
and prune, the models listing. Above edge_deploy.repository (files) and edge_deploy.serve (servers), which know
nothing of each other."""
