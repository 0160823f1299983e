"""The workbench: a read-only web viewer of a store (`compute-budget serve`, extra `compute-budget[workbench]`).

Routes and safety are in `app`, what the pages show in `model`, the one-at-a-time audit in `audit_runner`,
and the server (uvicorn on a socket bound first) in `server`.
"""
