"""`edge-deploy bench`: a served lane model measured as a vehicle app sees it (frames in, lanes out).

`config` (what to measure), `frames` (the frames), `targets` (the served lane models and their
pipelines), `lanes_check` (every pipeline of a model gives the same lanes), `server_stats` (Triton's
per-model queue and compute times), `process_cpu` (CPU of the client and of tritonserver), `jetson`
(tegrastats / jtop), `runner` (the cells), `results` (typed results), `report` (table and plot).
Import from the modules: `from edge_deploy.bench.runner import run_bench`.
"""
