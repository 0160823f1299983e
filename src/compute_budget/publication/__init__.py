"""Reading a published log (spec section 10): C2SP tiles, entry bundles and the checkpoint, from a folder or an
HTTP(S) prefix, as a source the auditor reads through the same interface as a database snapshot."""
