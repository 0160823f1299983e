"""The functional core: pure policy, hashing, validation, Merkle and note formats; no I/O, clock or environment."""
