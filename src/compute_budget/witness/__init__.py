"""The witness (spec 9.4): a process on another machine that keeps, per log, the largest checkpoint it verified,
refuses anything that does not extend it, and cosigns what does (C2SP tlog-witness). It reads the log's formats
(`core.log`) and keeps its own state file; it imports nothing of the store, the audit or the viewer. `client` is
the other side of the wire: how a writer's store submits to witnesses and how the audit reads `GET /latest`."""
