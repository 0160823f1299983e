"""Names of the v1 contract, transcribed from the spec (sections 2 and 3.3) rather than imported from the code,
so the tests check the code against the spec and not against itself."""

from __future__ import annotations

# ComputeBudgetDecision's fields and JSON keys, in the record's order (spec section 2).
DECISION_KEYS: tuple[str, ...] = (
    "budget_id",
    "policy_version",
    "gate_decision_id",
    "gate_policy_version",
    "gate_input_digest",
    "status",
    "reason_code",
    "max_candidates",
    "max_depth",
    "max_steps",
    "max_wallclock_ms",
    "max_parallelism",
    "evidence_spans",
    "explanation",
)

# The eleven keys hashed into budget_id (spec 3.3).
HASHED_FIELDS: tuple[str, ...] = (
    "policy_version",
    "gate_decision_id",
    "gate_policy_version",
    "gate_input_digest",
    "status",
    "reason_code",
    "max_candidates",
    "max_depth",
    "max_steps",
    "max_parallelism",
    "evidence_spans",
)

# Finding kinds (spec section 6, then the seal's of section 8, the witnesses' of section 9.3, the publication's
# of section 10).
FINDING_KINDS: tuple[str, ...] = (
    "budget_id_mismatch",
    "rederive_mismatch",
    "chain_break",
    "unsupported_policy_version",
    "malformed_row",
    "checkpoint_mismatch",
    "bad_signature",
    "unattested_rows",
    "schema_tampered",
    "unwitnessed_rows",
    "published_mismatch",  # spec section 10: a publication's entry differs from its tile (10.1, 10.2)
    "unpublished_rows",  # spec 10.2: rows a witness saw that a publication does not hold
)
