"""The Remote Lab service: our chambers behind the HTTP API the chamber authors' client (`causalchamber.lab`) speaks.

Why a package of its own (protocols floor): the API (app.py), the durable queue (store.py, on SQLite or
PostgreSQL), accounts (accounts.py), the checks before queuing (validation.py), the result zips (results.py), the
lab file (lab_file.py) and the workers that run experiments beside their chambers (worker.py) are one service,
distinct from the agent's chamber tools API (protocols/api/) and from one bench's main job (protocols/bench_job.py).
"""
