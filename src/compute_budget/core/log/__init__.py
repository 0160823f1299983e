"""The transparency log's formats: RFC 6962 Merkle trees and tiles, C2SP signed notes and checkpoints.

Entries are opaque leaf hashes here; nothing in this package knows what a budget decision is, and it imports
nothing of `core.policy`.
"""
