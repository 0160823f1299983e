"""The replay auditor and the verified copy: read a store, re-derive every row, report what does not hold."""
