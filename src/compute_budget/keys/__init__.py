"""Key files and the writer's state file: what a writer, an auditor or a witness keeps on its own disk, read and
written with the care secrets need (modes, no symlinks, whole writes). Below the store: nothing here opens a
database."""
