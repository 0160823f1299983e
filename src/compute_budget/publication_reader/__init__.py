"""The reader of a publication (`publication_writer` writes one): a published log (spec section 10), its C2SP
tiles, entry bundles and checkpoint read from a folder or an HTTP(S) prefix, as a source the auditor reads through
the same interface as a database snapshot."""
