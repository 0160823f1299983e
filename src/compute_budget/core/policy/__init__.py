"""The policy: a search gate's shape, its parsing, the v1 table of ceilings, and the decision's identity.

Nothing here knows that decisions are stored, chained or logged; it imports `core.canonical` and nothing of
`core.log`.
"""
