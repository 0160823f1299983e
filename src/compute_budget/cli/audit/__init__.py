"""`compute-budget audit` (a lazy command) in its rooms: `command` (its options, its request, its run: the module
`cli.program.LAZY_COMMANDS` loads), `reports` (the report files when the audit has no verdict), `keep` (what
`--save-checkpoint` keeps), `tiles` (`audit --tiles` and `prove --tiles`) and `render` (a report as text, JSON or
JUnit, which `publish` shows too). Loading the package loads none of them."""
