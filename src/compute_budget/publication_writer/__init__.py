"""The writer of a publication (`publication_reader` reads one back): it writes a store's log into a folder as a
C2SP `tlog-tiles` publication (spec 10.1) that any static web server can serve. It checks new rows through the
auditor before it publishes them, so it sits above it.

Rooms: `choose` (which checkpoint), `checks` (rules 1, 2 and 4), `layout` (the files new since the published size),
`handovers` (the handovers of `--retired` keys, spec 11.1),
`write` (DIR on disk: lock, staging, renames) and `run` (the order of it all: `publish`).
"""

from compute_budget.publication_writer.run import PublishOutcome, PublishRequest, publish

__all__ = ["PublishOutcome", "PublishRequest", "publish"]
