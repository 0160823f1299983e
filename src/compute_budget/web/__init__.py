"""The workbench: a read-only web viewer of a store (`compute-budget serve`, extra `compute-budget[workbench]`).

Routes are in `app` and the outermost safety layer in `guard`. What the pages show is in one room per idea:
`queries` (the query string), `rows` (rows listed and checked live), `charts` (counts and their SVG),
`decision` (one decision) with `policy_table` (the policy's table as the policy decides it), `checkpoints`
(checkpoints and trusted keys), `report` (the one reader of the audit report) and `verdicts` (the banners).
The one-at-a-time audit is in `audit_runner`, and the server (uvicorn on a socket bound first) in `server`.
"""
