"""C2SP tlog-policy files (core/log/witness_policy.py, witness_policy_file.py): the document's own examples, a
two-group quorum, optional witnesses, one typed line naming its line for every malformed file, the origin rule,
the `--witness-key` shorthand, and random group trees against a brute-force reference."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.cosignature import MAX_TIMESTAMP, WitnessKey, WitnessSigner
from compute_budget.core.log.note import SignerKey
from compute_budget.core.log.witness_policy import TlogPolicy, shown
from compute_budget.core.log.witness_policy_file import parse_policy
from compute_budget.errors import (
    ArgumentTypeError,
    InputError,
    MalformedPolicy,
    PolicyError,
    PolicyOriginMismatch,
    PolicyProblem,
)

ORIGIN = "example.com/budget-log"
LOG = SignerKey.from_seed(ORIGIN, bytes(range(32))).verifier()
OTHER_LOG = SignerKey.from_seed("example.org/other", bytes(range(1, 33))).verifier()


def witness_key(name: str, seed: int) -> WitnessKey:
    """A fixed witness key (Ed25519 is deterministic): `seed` picks the key, `name` its vkey name."""
    return WitnessSigner.from_seed(name, bytes([seed]) * 32).verifier()


KEYS = {name: witness_key(name, number) for number, name in enumerate(
    ["X1", "X2", "X3", "Y1", "Y2", "Y3", "A1", "A2", "B1", "B2", "B3", "O1", "O2"], start=1
)}


def policy_text(template: str) -> bytes:
    """`template` with each ``<vkey NAME>`` replaced by NAME's fixed witness key and ``<log>`` by the log key."""
    text = template.replace("<log>", LOG.format())
    for name, key in KEYS.items():
        text = text.replace(f"<vkey {name}>", key.format())
    return text.encode("utf-8", "surrogateescape")  # a lone surrogate stands for a byte that is not UTF-8


# The example of C2SP tlog-policy.md ("Example policy"), keys filled in.
C2SP_EXAMPLE = """log <log>

witness X1 <vkey X1>
witness X2 <vkey X2>
witness X3 <vkey X3>
group X-witnesses 2 X1 X2 X3

witness Y1 <vkey Y1>
witness Y2 <vkey Y2>
witness Y3 <vkey Y3>
group Y-witnesses any Y1 Y2 Y3

group X-and-Y all X-witnesses Y-witnesses
quorum X-and-Y
"""

# The policy: all of group A and 1 of group B, and two optional witnesses the quorum never reaches.
TWO_GROUPS = """# our two witnesses, and the public ones
log <log> https://log.example.com/
witness A1 <vkey A1> https://a1.example.com/witness
witness A2 <vkey A2>
group A all A1 A2
witness B1 <vkey B1>
witness B2 <vkey B2>
witness B3 <vkey B3>
group B any B1 B2 B3
group A-and-B all A B
quorum A-and-B
witness O1 <vkey O1>
witness O2 <vkey O2> http://127.0.0.1:7380
"""


def test_the_c2sp_example_parses_and_means_what_the_document_says() -> None:
    """C2SP's own example: one log, six witnesses, and a checkpoint counts with at least two of the X witnesses
    and at least one of the Y witnesses, never otherwise."""
    policy = parse_policy(policy_text(C2SP_EXAMPLE))
    assert [log.key for log in policy.logs] == [LOG]
    assert [witness.name for witness in policy.witnesses] == ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    assert [(group.name, group.threshold) for group in policy.groups] == [
        ("X-witnesses", 2), ("Y-witnesses", 1), ("X-and-Y", 2)
    ]
    assert policy.quorum == "X-and-Y"
    assert policy.optional_witnesses() == ()
    xs, ys = ["X1", "X2", "X3"], ["Y1", "Y2", "Y3"]
    for x_count in range(4):
        for y_count in range(4):
            for x_set in combinations(xs, x_count):
                for y_set in combinations(ys, y_count):
                    assert policy.quorum_met(x_set + y_set) is (x_count >= 2 and y_count >= 1)
    assert policy.quorum_in_words() == (
        "all of X-witnesses, Y-witnesses (X-witnesses = 2 of X1, X2, X3; Y-witnesses = 1 of Y1, Y2, Y3)"
    )


@pytest.mark.parametrize(
    ("text", "witnesses", "met_by", "words"),
    [
        # "A policy without witness cosigning can be defined using a `quorum none` line" (no logs, no witnesses).
        ("quorum none\n", (), [()], "none (no cosignature is required)"),
        # "In the simplest case, the name refers to a witness".
        ("witness X1 <vkey X1>\nquorum X1\n", ("X1",), [("X1",)], "a cosignature by X1"),
        # The three group forms: all, any, and a number k with 1 <= k <= n.
        ("witness X1 <vkey X1>\nwitness X2 <vkey X2>\ngroup G all X1 X2\nquorum G\n", ("X1", "X2"),
         [("X1", "X2")], "all of X1, X2"),
        ("witness X1 <vkey X1>\nwitness X2 <vkey X2>\ngroup G any X1 X2\nquorum G\n", ("X1", "X2"),
         [("X1",), ("X2",)], "1 of X1, X2"),
        ("witness X1 <vkey X1>\nwitness X2 <vkey X2>\nwitness X3 <vkey X3>\ngroup G 2 X1 X2 X3\nquorum G\n",
         ("X1", "X2", "X3"), [("X1", "X2"), ("X1", "X3"), ("X2", "X3")], "2 of X1, X2, X3"),
    ],
)
def test_the_documents_other_forms_parse(
    text: str, witnesses: tuple[str, ...], met_by: list[tuple[str, ...]], words: str
) -> None:
    """Each form the document defines parses, and its quorum is met by exactly the minimal sets listed (and
    their supersets), by no smaller set."""
    policy = parse_policy(policy_text(text))
    assert tuple(witness.name for witness in policy.witnesses) == witnesses
    assert policy.quorum_in_words() == words
    for size in range(len(witnesses) + 1):
        for chosen in combinations(witnesses, size):
            assert policy.quorum_met(chosen) is any(set(minimal) <= set(chosen) for minimal in met_by), chosen


def test_whitespace_comments_and_blank_lines_are_read_as_the_document_says() -> None:
    """Fields split on runs of spaces and tabs; leading and trailing blanks are allowed; a line of blanks is
    ignored, and so is a line whose first non-blank character is #."""
    text = policy_text(
        "   # a comment after blanks\n\t\n  \t log\t <log>   \n"
        "witness \t X1 <vkey X1>\t\n#quorum none\n  quorum   X1  \n"
    )
    policy = parse_policy(text)
    assert [log.key for log in policy.logs] == [LOG]
    assert policy.quorum == "X1"
    assert [(w.name, w.line) for w in policy.witnesses] == [("X1", 4)]


def test_two_groups_accept_and_refuse_the_right_sets_and_optional_witnesses_never_count() -> None:
    """The issue's policy, "all of group A and 1 of group B": A1 and A2 and any one B; O1 and O2 are defined
    but the quorum does not reach them, so they are reported as optional and never counted."""
    policy = parse_policy(policy_text(TWO_GROUPS))
    assert policy.optional_witnesses() == ("O1", "O2")
    assert policy.counted_witnesses() == ("A1", "A2", "B1", "B2", "B3")
    accepted = [{"A1", "A2", "B1"}, {"A1", "A2", "B3"}, {"A1", "A2", "B1", "B2", "B3"}, {"A1", "A2", "B2", "O1"}]
    refused = [set(), {"A1", "A2"}, {"A1", "B1", "B2", "B3"}, {"A2", "B1"}, {"O1", "O2"},
               {"A1", "B1", "O1", "O2"}, {"A1", "A2", "O1", "O2"}, {"B1", "B2", "B3", "O1", "O2"}]
    for cosigned in accepted:
        assert policy.quorum_met(cosigned), cosigned
    for cosigned in refused:
        assert not policy.quorum_met(cosigned), cosigned
    verdict = policy.evaluate({"A1", "O2", "B2"})
    assert (verdict.met, verdict.counted, verdict.optional) == (False, ("A1", "B2"), ("O2",))
    assert policy.quorum_in_words() == "all of A, B (A = all of A1, A2; B = 1 of B1, B2, B3)"
    assert [w.url for w in policy.witnesses if w.url] == ["https://a1.example.com/witness", "http://127.0.0.1:7380"]
    assert policy.logs[0].url == "https://log.example.com/"


def test_optional_witnesses_never_move_the_quorum_time() -> None:
    """An optional witness's fresh cosignature does not make a stale quorum fresh: only the counted ones date it."""
    policy = parse_policy(policy_text(TWO_GROUPS))
    old = {"A1": 100, "A2": 200, "B1": 150}
    assert policy.quorum_time(old) == 100
    assert policy.quorum_time({**old, "O1": 10**9, "O2": 10**9}) == 100
    assert policy.quorum_time({"O1": 10**9, "O2": 10**9}) is None


def test_names_outside_the_policy_count_for_nothing() -> None:
    """A name the policy does not define (say, a witness key given elsewhere) never helps meet the quorum."""
    policy = parse_policy(policy_text(TWO_GROUPS))
    assert not policy.quorum_met({"A1", "B1", "A3", "none", "A"})
    assert policy.names_of([KEYS["A1"], KEYS["O1"], KEYS["X1"]]) == {"A1", "O1"}


def test_names_are_opaque_octets() -> None:
    """C2SP: names are octet strings. The Kelvin sign is not K; a no-break space inside a name is part of it (only
    ASCII space and tab separate fields); a name that is not UTF-8 is kept, and shown with \\x escapes."""
    text = (
        "witness K <vkey X1>\nwitness \u212a <vkey X2>\nwitness a\u00a0b <vkey X3>\n"
        "witness caf\udce9 <vkey Y1>\n# un commentaire \udce9crit en Latin-1\n"
        "group G all K \u212a a\u00a0b caf\udce9\nquorum G\n"
    )
    data = policy_text(text)
    assert b"caf\xe9 " in data  # the surrogate stands for the one byte 0xE9, which is not UTF-8 here
    policy = parse_policy(data)
    names = [witness.name for witness in policy.witnesses]
    assert names[:3] == ["K", "\u212a", "a\u00a0b"]
    assert len(set(names)) == 4
    assert not policy.quorum_met({"K", "\u212a", "a\u00a0b"})
    assert policy.quorum_met(names)
    assert shown(names[3]) == "caf\\xe9"
    assert shown(names[2]) == "a\\u00a0b"
    assert policy.render().count(b"caf\xe9") == 2


def test_the_identity_is_the_sha256_of_the_files_bytes_and_rendering_reads_back() -> None:
    """Reports name a policy by the SHA-256 of its file's bytes: a comment changes the identity, not the rules;
    `render()` writes a policy file that parses to equal logs, witnesses, groups and quorum."""
    data = policy_text(TWO_GROUPS)
    policy = parse_policy(data)
    assert policy.sha256 == hashlib.sha256(data).hexdigest()
    commented = parse_policy(data + b"# reviewed\n")
    assert commented.sha256 != policy.sha256
    rules = (policy.logs, policy.witnesses, policy.groups, policy.quorum)
    assert (commented.logs, commented.witnesses, commented.groups, commented.quorum) == rules
    again = parse_policy(policy.render())
    assert (again.logs, again.witnesses, again.groups, again.quorum) == rules


# ---- the origin rule ----------------------------------------------------------------------------------------


def test_a_log_key_must_be_named_after_the_stores_origin() -> None:
    """Each log line's key name is the log's origin: a store gets the keys named after its origin; a policy whose
    log lines name none is refused, naming the line and `keygen ORIGIN`."""
    policy = parse_policy(policy_text(TWO_GROUPS))
    assert policy.store_log_keys(ORIGIN) == (LOG,)
    with pytest.raises(PolicyOriginMismatch) as caught:
        policy.store_log_keys("example.com/another")
    assert caught.value.line == 2
    assert caught.value.problem is PolicyProblem.ORIGIN_MISMATCH
    assert str(caught.value).startswith("line 2: the log key is named example.com/budget-log, not this store's")
    assert "keygen ORIGIN" in str(caught.value)
    # One policy may name every log its witnesses follow: each store takes its own log's keys, and a store none
    # of the lines names is refused, naming the first.
    mixed = parse_policy(policy_text(f"log <log>\n\nlog {OTHER_LOG.format()}\nquorum none\n"))
    assert mixed.store_log_keys(ORIGIN) == (LOG,)
    assert mixed.store_log_keys("example.org/other") == (OTHER_LOG,)
    with pytest.raises(PolicyOriginMismatch, match=r"^line 1: the log key is named example.com/budget-log, not "
                       r"this store's origin example.net/third, and no log line names it"):
        mixed.store_log_keys("example.net/third")
    assert mixed.log_keys_by_origin() == {ORIGIN: (LOG,), "example.org/other": (OTHER_LOG,)}
    assert parse_policy(b"quorum none\n").store_log_keys(ORIGIN) == ()


# ---- the --witness-key shorthand ----------------------------------------------------------------------------


def test_the_shorthand_is_the_same_value_as_its_one_group_policy_file() -> None:
    """`--witness-key` x3 `--witness-quorum 2` builds the policy a one-group file states; the default quorum is
    all of them; a key given twice is one key; the identity is the SHA-256 of the policy it renders to."""
    keys = [KEYS["X1"], KEYS["X2"], KEYS["X3"], KEYS["X1"]]
    shorthand = TlogPolicy.from_witness_keys(keys, 2)
    written = parse_policy(policy_text(
        "witness X1 <vkey X1>\nwitness X2 <vkey X2>\nwitness X3 <vkey X3>\ngroup witness-quorum 2 X1 X2 X3\n"
        "quorum witness-quorum\n"
    ))
    assert (shorthand.witnesses, shorthand.groups, shorthand.quorum) == (
        written.witnesses, written.groups, written.quorum
    )
    assert shorthand.sha256 == written.sha256 == hashlib.sha256(shorthand.render()).hexdigest()
    assert shorthand.quorum_in_words() == "2 of X1, X2, X3"
    every = TlogPolicy.from_witness_keys(keys)
    assert not every.quorum_met({"X1", "X2"})
    assert every.quorum_met({"X1", "X2", "X3"})
    nothing = TlogPolicy.from_witness_keys([])
    assert nothing.quorum == "none"
    assert not nothing.requires_witnesses
    assert nothing.quorum_met(())


def test_the_shorthand_keeps_keys_that_share_a_name_apart() -> None:
    """Two distinct keys with one name (or a key named none) get ``name+keyID``, which no key name can be."""
    first, second, odd = witness_key("w", 1), witness_key("w", 2), witness_key("none", 3)
    policy = TlogPolicy.from_witness_keys([first, second, odd], 3)
    assert [w.name for w in policy.witnesses] == [
        f"w+{first.key_id:08x}", f"w+{second.key_id:08x}", f"none+{odd.key_id:08x}"
    ]
    assert policy.names_of([second]) == {f"w+{second.key_id:08x}"}
    named = TlogPolicy.from_witness_keys([witness_key("witness-quorum", 4)])
    assert named.quorum == "witness-quorum+"
    assert named.quorum_met({"witness-quorum"})


@pytest.mark.parametrize(
    ("keys", "quorum", "message"),
    [
        (["X1", "X2"], 3, "--witness-quorum 3 is outside 1..2, the number of distinct --witness-key keys"),
        (["X1", "X2"], 0, "--witness-quorum 0 is outside 1..2"),
        ([], 1, "--witness-quorum 1 is outside 1..0"),
    ],
)
def test_the_shorthand_refuses_a_quorum_out_of_range(keys: list[str], quorum: int, message: str) -> None:
    """`--witness-quorum` must be 1..the number of distinct keys (spec 9.3), one line naming the option."""
    with pytest.raises(MalformedPolicy) as caught:
        TlogPolicy.from_witness_keys([KEYS[name] for name in keys], quorum)
    assert str(caught.value).startswith(message)
    assert caught.value.line is None
    assert caught.value.problem is PolicyProblem.SHORTHAND


def test_the_shorthand_refuses_one_public_key_under_two_names() -> None:
    """C2SP counts vkeys wrapping one public key as duplicates: one witness must not count twice."""
    with pytest.raises(MalformedPolicy, match="wrap the same public key: one witness would count twice"):
        TlogPolicy.from_witness_keys([witness_key("w", 7), witness_key("v", 7)])


# ---- malformed files: one typed line each, naming the line ---------------------------------------------------

W1, W2 = "witness W1 <vkey X1>\n", "witness W2 <vkey X2>\n"

MALFORMED = [
    ("control character", "quorum none\n# a form feed \f here\n", 2, PolicyProblem.CHARACTER,
     "byte 0x0c at column 15 is a control character; only tab and newline are allowed"),
    ("DEL", W1 + "quorum\x7f W1\n", 2, PolicyProblem.CHARACTER, "byte 0x7f at column 7"),
    ("CRLF", "quorum none\r\n", 1, PolicyProblem.CHARACTER, "(a Windows line ending? save the file with LF"),
    ("NUL", "\x00\nquorum none\n", 1, PolicyProblem.CHARACTER, "byte 0x00 at column 1"),
    ("no final newline", W1 + "quorum W1", 2, PolicyProblem.NO_FINAL_NEWLINE, "does not end with a newline"),
    ("unknown keyword", W1 + "\nwitnesses W2 <vkey X2>\nquorum W1\n", 3, PolicyProblem.UNKNOWN_KEYWORD,
     "unknown keyword witnesses: a line is log, witness, group or quorum"),
    ("keyword in capitals", "Quorum none\n", 1, PolicyProblem.UNKNOWN_KEYWORD, "unknown keyword Quorum"),
    ("log without key", "log\nquorum none\n", 1, PolicyProblem.FIELDS,
     "a log line is `log <vkey> [<url>]`, this one has 1 field"),
    ("end-of-line comment", "log <log> https://log.example.com/ # ours\nquorum none\n", 1, PolicyProblem.FIELDS,
     "# starts a comment only at the start of a line"),
    ("comment as URL", "log <log> #ours\nquorum none\n", 1, PolicyProblem.BAD_URL,
     "URL starts with #: a comment starts only at the start of a line"),
    ("witness without key", "witness W1\nquorum none\n", 1, PolicyProblem.FIELDS,
     "a witness line is `witness <name> <vkey> [<url>]`, this one has 2 fields"),
    ("quorum with two names", W1 + W2 + "quorum W1 W2\n", 3, PolicyProblem.FIELDS,
     "a quorum line is `quorum <name>`, this one has 3 fields"),
    ("group without members", W1 + "group G 1\nquorum G\n", 2, PolicyProblem.FIELDS, "with at least one member"),
    ("log key of a witness", "log <vkey X1>\nquorum none\n", 1, PolicyProblem.BAD_KEY,
     "the log key is not a verifier key: this is a witness key (type 0x04); a note key has type 0x01"),
    ("witness key of a log", "witness W1 <log>\nquorum none\n", 1, PolicyProblem.BAD_KEY,
     "the witness W1 key is not a witness key: this is a note key (type 0x01)"),
    ("garbled key", "witness W1 W1+0000+AAAA\nquorum none\n", 1, PolicyProblem.BAD_KEY,
     "key hash '0000' is not 8 lowercase hex digits"),
    ("private key", "witness W1 PRIVATE+KEY+W1+00000000+AAAA\nquorum none\n", 1, PolicyProblem.BAD_KEY,
     "this is a private signer key"),
    ("ftp URL", "witness W1 <vkey X1> ftp://w.example/\nquorum none\n", 1, PolicyProblem.BAD_URL,
     "the witness's URL must start with http:// or https:// and name a host"),
    ("URL without host", "log <log> https:///x\nquorum none\n", 1, PolicyProblem.BAD_URL, "name a host"),
    ("threshold word", W1 + "group G two W1\nquorum G\n", 2, PolicyProblem.BAD_THRESHOLD,
     "group G's threshold two is not all, any or a decimal number"),
    ("threshold with leading zero", W1 + "group G 01 W1\nquorum G\n", 2, PolicyProblem.BAD_THRESHOLD,
     "(no sign, no leading zero)"),
    ("threshold with sign", W1 + "group G +1 W1\nquorum G\n", 2, PolicyProblem.BAD_THRESHOLD, "threshold +1"),
    ("threshold in other digits", W1 + "group G \u0661 W1\nquorum G\n", 2, PolicyProblem.BAD_THRESHOLD,
     "is not all, any or a decimal number"),
    ("threshold above the members", W1 + W2 + "group G 3 W1 W2\nquorum G\n", 3, PolicyProblem.THRESHOLD_RANGE,
     "group G needs 3 of its 2 member(s); the threshold must be 1..2"),
    ("huge threshold", W1 + "group G 99999999999999999999 W1\nquorum G\n", 2, PolicyProblem.THRESHOLD_RANGE,
     "the threshold must be 1..1"),
    ("threshold zero", W1 + "group G 0 W1\nquorum G\n", 2, PolicyProblem.THRESHOLD_RANGE,
     "`quorum none` is how to require no cosignature"),
    ("duplicate witness name", W1 + "witness W1 <vkey X2>\nquorum W1\n", 2, PolicyProblem.DUPLICATE_NAME,
     "the name W1 is already defined on line 1 (witnesses and groups share one set of names)"),
    ("group named like a witness", W1 + W2 + "group W2 any W1\nquorum W2\n", 3, PolicyProblem.DUPLICATE_NAME,
     "the name W2 is already defined on line 2"),
    ("witness named none", "witness none <vkey X1>\nquorum none\n", 1, PolicyProblem.DUPLICATE_NAME,
     "the name none is predefined"),
    ("group named none", W1 + "group none any W1\nquorum W1\n", 2, PolicyProblem.DUPLICATE_NAME,
     "the name none is predefined"),
    ("undefined member", W1 + W2 + "\n\n\n\ngroup G all W1 W\nquorum G\n", 7, PolicyProblem.UNDEFINED_NAME,
     "group G names undefined member W (define it on a line above)"),
    ("member defined below", W1 + "group G all W1 W2\n" + W2 + "quorum G\n", 2, PolicyProblem.UNDEFINED_NAME,
     "group G names undefined member W2"),
    ("a group in itself (a cycle)", W1 + "group G any W1 G\nquorum G\n", 2, PolicyProblem.UNDEFINED_NAME,
     "group G names undefined member G (a group cannot contain itself)"),
    ("none as a member", W1 + "group G any W1 none\nquorum G\n", 2, PolicyProblem.NONE_MEMBER,
     "group G lists none, which is only a quorum, never a member"),
    ("member twice in a group", W1 + W2 + "group G 2 W1 W2 W1\nquorum G\n", 3, PolicyProblem.MEMBER_TWICE,
     "group G lists W1 twice"),
    ("member of two groups", W1 + W2 + "group G any W1 W2\ngroup H any W2\nquorum G\n", 4,
     PolicyProblem.MEMBER_TWICE, "group H lists W2, already a member of group G (line 3); a name is a member of"),
    ("group under two groups", W1 + "group G any W1\ngroup H any G\ngroup I any G\nquorum H\n", 4,
     PolicyProblem.MEMBER_TWICE, "group I lists G, already a member of group H (line 3)"),
    ("duplicate log", "log <log>\nlog <log> https://mirror.example.com/\nquorum none\n", 2,
     PolicyProblem.DUPLICATE_KEY, "this log key wraps the same public key as the log line on line 1"),
    ("one witness key under two names", W1 + f"witness W2 {witness_key('other', 1).format()}\nquorum W1\n", 2,
     PolicyProblem.DUPLICATE_KEY, "this witness key wraps the same public key as the witness line on line 1"),
    ("quorum undefined", W1 + "quorum W2\n", 2, PolicyProblem.UNDEFINED_NAME, "the quorum names undefined W2"),
    ("quorum before its group", W1 + "quorum G\ngroup G any W1\n", 2, PolicyProblem.UNDEFINED_NAME,
     "the quorum names undefined G (define the witness or group on a line above it)"),
    ("two quorum lines", W1 + "quorum W1\n\nquorum none\n", 4, PolicyProblem.QUORUM_TWICE,
     "a second quorum line (the first is line 2); a policy has exactly one"),
]


@pytest.mark.parametrize(("text", "line", "problem", "message"), [case[1:] for case in MALFORMED],
                         ids=[case[0] for case in MALFORMED])
def test_every_malformed_line_is_one_typed_line_naming_it(
    text: str, line: int, problem: PolicyProblem, message: str
) -> None:
    """Each thing the format forbids is a `MalformedPolicy` (an `InputError`: exit 2 at the CLI) whose one-line
    message starts with ``line N:`` and says what is wrong."""
    with pytest.raises(MalformedPolicy) as caught:
        parse_policy(policy_text(text))
    error = caught.value
    assert (error.line, error.problem) == (line, problem)
    assert str(error).startswith(f"line {line}: ")
    assert message in str(error), str(error)
    assert "\n" not in str(error)
    assert isinstance(error, InputError)
    assert isinstance(error, PolicyError)


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "witness W1 <vkey X1>\ngroup G any W1\n"])
def test_a_policy_without_a_quorum_line_is_refused(text: str) -> None:
    """"A policy file must include exactly one quorum line": none at all is one line saying how to add it."""
    with pytest.raises(MalformedPolicy) as caught:
        parse_policy(policy_text(text))
    assert caught.value.problem is PolicyProblem.QUORUM_MISSING
    assert caught.value.line is None
    assert str(caught.value).startswith("the policy has no quorum line: add `quorum NAME`")


def test_a_password_in_a_bad_url_is_not_echoed() -> None:
    """A URL may carry user information (spec 9.9.6): the error never repeats it."""
    with pytest.raises(MalformedPolicy) as caught:
        parse_policy(policy_text("log <log> ftp://user:secret@log.example.com/\nquorum none\n"))
    assert "secret" not in str(caught.value)


def test_a_policy_is_read_from_bytes_only() -> None:
    """The identity is of the file's bytes, so text is a programming error, said in one line."""
    with pytest.raises(ArgumentTypeError, match="read from the file's bytes, not str"):
        parse_policy("quorum none\n")  # type: ignore[arg-type]


def test_a_policy_value_built_by_hand_is_held_to_the_same_rules() -> None:
    """`TlogPolicy(...)` checks itself: a group naming a member that is not defined is refused."""
    parsed = parse_policy(policy_text(TWO_GROUPS))
    with pytest.raises(MalformedPolicy, match="names undefined member A1"):
        TlogPolicy(parsed.logs, parsed.witnesses[1:], parsed.groups, parsed.quorum, parsed.sha256)


# ---- random group trees against a brute-force reference ------------------------------------------------------

WITNESS_POOL = [witness_key(f"w{number}", number + 40) for number in range(6)]


@dataclass(frozen=True)
class Tree:
    """A random policy as plain data: witness names, groups (name, threshold, members) in order, the quorum."""

    witnesses: tuple[str, ...]
    groups: tuple[tuple[str, int, tuple[str, ...]], ...]
    quorum: str

    def text(self, spell: list[bool]) -> bytes:
        """The policy file; where `spell` says so, `all` and `any` stand for their thresholds."""
        lines = [f"witness {name} {WITNESS_POOL[i].format()}" for i, name in enumerate(self.witnesses)]
        for (name, k, members), word in zip(self.groups, spell, strict=False):
            spelled = "all" if word and k == len(members) else "any" if word and k == 1 else str(k)
            lines.append(f"group {name} {spelled} {' '.join(members)}")
        return ("\n".join([*lines, f"quorum {self.quorum}"]) + "\n").encode()

    def met(self, name: str, cosigned: frozenset[str]) -> bool:
        """The reference: a witness is met when it cosigned, a group when k of its members are (recursively)."""
        if name == "none":
            return True
        for group, k, members in self.groups:
            if group == name:
                return sum(self.met(member, cosigned) for member in members) >= k
        return name in cosigned

    def reached(self, name: str) -> set[str]:
        """The witnesses under `name`."""
        for group, _, members in self.groups:
            if group == name:
                return set().union(*(self.reached(member) for member in members))
        return {name} if name in self.witnesses else set()


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    """Up to six witnesses and five groups, each group over names not yet in any group (the format's rule)."""
    witnesses = tuple(f"w{number}" for number in range(draw(st.integers(1, len(WITNESS_POOL)))))
    free = list(witnesses)
    groups: list[tuple[str, int, tuple[str, ...]]] = []
    for number in range(draw(st.integers(0, 5))):
        if not free:
            break
        members = tuple(draw(st.lists(st.sampled_from(free), min_size=1, max_size=4, unique=True)))
        name = f"g{number}"
        groups.append((name, draw(st.integers(1, len(members))), members))
        free = [other for other in free if other not in members] + [name]
    quorum = draw(st.sampled_from(["none", *witnesses, *(group[0] for group in groups)]))
    return Tree(witnesses, tuple(groups), quorum)


def brute_time(tree: Tree, timestamps: Mapping[str, int]) -> int | None:
    """The newest T such that the witnesses with timestamps >= T meet the quorum, by trying every T."""
    if tree.quorum == "none":
        return MAX_TIMESTAMP
    times = sorted(set(timestamps.values()), reverse=True)
    return next((t for t in times if tree.met(tree.quorum, frozenset(n for n, v in timestamps.items() if v >= t))),
                None)


@settings(max_examples=300, deadline=None)
@given(tree=trees(), spell=st.lists(st.booleans(), min_size=5, max_size=5), data=st.data())
def test_random_group_trees_agree_with_the_brute_force_reference(tree: Tree, spell: list[bool],
                                                                 data: st.DataObject) -> None:
    """For every set of cosigners the parsed policy's verdict is the reference's; the optional witnesses are the
    ones the quorum does not reach; the quorum time is the brute-force one; the rendering reads back equal."""
    policy = parse_policy(tree.text(spell))
    reached = tree.reached(tree.quorum)
    assert set(policy.counted_witnesses()) == reached
    assert set(policy.optional_witnesses()) == set(tree.witnesses) - reached
    for size in range(len(tree.witnesses) + 1):
        for chosen in combinations(tree.witnesses, size):
            verdict = policy.evaluate(chosen)
            assert verdict.met is tree.met(tree.quorum, frozenset(chosen)), chosen
            assert set(verdict.counted) | set(verdict.optional) == set(chosen)
            assert not set(verdict.optional) & reached
    timestamps = data.draw(st.dictionaries(st.sampled_from(tree.witnesses), st.integers(0, 20)))
    assert policy.quorum_time(timestamps) == brute_time(tree, timestamps)
    again = parse_policy(policy.render())
    assert (again.witnesses, again.groups, again.quorum) == (policy.witnesses, policy.groups, policy.quorum)

