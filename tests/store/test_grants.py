"""`compute-budget grants` (issue 18): the exact GRANTs of a writer and an auditor, held to the tables a migrated
PostgreSQL database really has, and roles holding exactly those grants (or one fewer) on a real server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from compute_budget.errors import InputError
from compute_budget.store.grants import RELEASE_TABLES, Role, grant_statements, quote_identifier
from tests.backends import tamper
from tests.conftest import REPO_ROOT

Run = Callable[..., tuple[int, str, str]]
EXAMPLES = str(REPO_ROOT / "examples" / "gates.jsonl")


def test_the_auditor_gets_select_on_every_table_and_connect_when_a_database_is_named(run_cli: Run) -> None:
    """One statement a line: CONNECT (with --db), USAGE on the schema, SELECT on each table, alembic_version too."""
    status, out, err = run_cli("grants", "--role", "auditor", "--auditor", "--db", "practice")
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        'GRANT CONNECT ON DATABASE "practice" TO "auditor";',
        'GRANT USAGE ON SCHEMA "public" TO "auditor";',
        *[f'GRANT SELECT ON TABLE "public"."{table}" TO "auditor";' for table in RELEASE_TABLES],
    ]
    assert "alembic_version" in out


def test_the_writer_inserts_where_it_appends_and_reads_the_rest(run_cli: Run) -> None:
    """SELECT and INSERT on the tables a writer appends to, SELECT on alembic_version, USAGE on the checkpoints'
    id sequence; no CONNECT without --db; a URL given as --db names its database."""
    status, out, _ = run_cli("grants", "--role", "practice", "--writer")
    assert status == 0
    lines = out.splitlines()
    assert not any("CONNECT" in line for line in lines)
    assert 'GRANT SELECT ON TABLE "public"."alembic_version" TO "practice";' in lines
    assert 'GRANT SELECT, INSERT ON TABLE "public"."compute_budget_decisions" TO "practice";' in lines
    assert 'GRANT USAGE ON SEQUENCE "public"."compute_budget_checkpoints_id_seq" TO "practice";' in lines
    assert not any("UPDATE" in line or "DELETE" in line or "TRUNCATE" in line for line in lines)
    status, out, _ = run_cli("grants", "--role", "w", "--writer", "--db", "postgresql+psycopg://u:p@host:5432/logs")
    assert status == 0
    assert out.splitlines()[0] == 'GRANT CONNECT ON DATABASE "logs" TO "w";'


def test_grants_refuses_a_url_of_a_database_without_roles(run_cli: Run) -> None:
    """GRANTs are for a database with roles (its backend says so, not a test of the URL's name): a SQLite URL, or
    one of a database compute-budget has no backend for, is a usage error naming what to give."""
    for url in ("sqlite:///practice.db", "mysql://u@host/logs", "postgresql+psycopg://u@host"):
        status, out, err = run_cli("grants", "--role", "w", "--writer", "--db", url)
        assert status == 2, url
        assert out == ""
        assert "give a postgresql:// URL that names a database" in err


def test_grants_takes_exactly_one_role_kind(run_cli: Run) -> None:
    """`--writer --auditor` printed the auditor's read-only grants (the last flag won), so someone asking for a
    writer's grants could get a role that cannot record. Both, or neither, is a usage error."""
    for flags in (("--writer", "--auditor"), ("--auditor", "--writer"), ()):
        status, out, err = run_cli("grants", "--role", "r", *flags)
        assert (status, out) == (2, "")
        assert "give exactly one of --writer or --auditor" in err


@pytest.mark.parametrize(
    ("name", "quoted"),
    [("auditor", '"auditor"'), ('we"ird', '"we""ird"'), ("Auditor Night", '"Auditor Night"'),
     ("écrivain", '"écrivain"')],
)
def test_names_are_quoted_as_sql_identifiers(name: str, quoted: str) -> None:
    """Double quotes doubled, case and spaces kept: the GRANT names exactly this role."""
    assert quote_identifier(name, "role name") == quoted
    assert grant_statements(name, Role.AUDITOR)[0].endswith(f" TO {quoted};")


@pytest.mark.parametrize(
    ("name", "why"),
    [("", "empty"), ("a\nb", "control character"), ("nul\x00", "control character"), ("x" * 64, "63 bytes"),
     ("é" * 32, "63 bytes"), ("bad\udcff", "not valid UTF-8")],
)
def test_a_name_that_cannot_be_quoted_exactly_is_exit_2(run_cli: Run, name: str, why: str) -> None:
    """Refused with one line, nothing printed: a name PostgreSQL would cut would grant to another role."""
    with pytest.raises(InputError, match=why):
        quote_identifier(name, "role name")
    status, out, err = run_cli("grants", "--role", name, "--auditor")
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert why in err


def test_a_role_kind_must_be_chosen(run_cli: Run) -> None:
    """Neither --writer nor --auditor: exit 2, saying which to give."""
    status, out, err = run_cli("grants", "--role", "r")
    assert (status, out) == (2, "")
    assert "--writer or --auditor" in err


# -- on a real server -----------------------------------------------------------------------------------------


@contextmanager
def role_with(pg_url: str, statements: list[str], name: str) -> Iterator[str]:
    """A LOGIN role `name` that holds exactly `statements` (run as the owner); yields its URL; dropped after."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    password = "grants-test"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE ROLE {quote_identifier(name, 'role')} LOGIN PASSWORD '{password}'")
        for statement in statements:
            connection.exec_driver_sql(statement)
    try:
        yield make_url(pg_url).set(username=name, password=password).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP OWNED BY {quote_identifier(name, 'role')}")
            connection.exec_driver_sql(f"DROP ROLE {quote_identifier(name, 'role')}")
        admin.dispose()


def _database(pg_url: str) -> str:
    from sqlalchemy.engine import make_url

    return str(make_url(pg_url).database)


@pytest.mark.postgres
def test_the_printed_grants_cover_every_table_and_sequence_of_a_migrated_store(run_cli: Run, pg_url: str) -> None:
    """The tables and sequences `migrate` creates are exactly those the grants name: a table added by a later
    migration fails this test until the grants name it."""
    from tests.backends import query

    assert run_cli("migrate", "--db", pg_url)[0] == 0
    relations = {
        (str(kind), str(name))
        for kind, name in query(
            pg_url,
            "SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S')",
        )
    }
    for role in Role:
        statements = grant_statements("r", role)
        named = {
            (kind, name)
            for kind, name in relations
            if any(f'ON {kind} "public"."{name}" TO' in statement for statement in statements)
        }
        expected = relations if role is Role.WRITER else {item for item in relations if item[0] == "TABLE"}
        assert named == expected, role


@pytest.mark.postgres
@pytest.mark.slow
def test_an_auditor_holding_exactly_the_printed_grants_audits_and_a_missing_one_is_named(
    run_cli: Run, pg_url: str, tmp_path: object
) -> None:
    """The recipe: clean store exit 0, tampered store exit 1 (as the auditor role, with the printed grants and
    nothing else); without SELECT on one table, exit 2 naming that table and the GRANT that fixes it."""
    assert run_cli("record", EXAMPLES, "--db", pg_url)[0] == 0
    name = f"auditor_{uuid.uuid4().hex[:8]}"
    printed = run_cli("grants", "--role", name, "--auditor", "--db", _database(pg_url))[1].splitlines()
    with role_with(pg_url, printed, name) as auditor:
        status, out, err = run_cli("audit", "--db", auditor)
        assert status == 0, err
        assert "CLEAN" in out
        listed = run_cli("list", "--db", auditor, "--format", "jsonl")[1].splitlines()
        budget_id = json.loads(listed[0])["budget_id"]
        for command in (("list", "--db", auditor, "--limit", "3"), ("checkpoint", "--db", auditor),
                        ("show", budget_id, "--db", auditor, "--verify")):
            status, _, err = run_cli(*command)
            assert status == 0, (command, err)
        from starlette.testclient import TestClient

        from compute_budget.web.app import create_app

        with TestClient(create_app(auditor)) as workbench:  # serve: the Workbench reads as the auditor
            for page in ("/", f"/decisions/{budget_id}", "/checkpoints"):
                response = workbench.get(page, follow_redirects=True)
                assert response.status_code == 200, (page, response.text[:300])
            response = workbench.post("/audit/run", headers={"Sec-Fetch-Site": "same-origin"}, follow_redirects=True)
            assert response.status_code == 200, response.text[:300]
        tamper(pg_url, "UPDATE compute_budget_decisions SET max_steps = 99 WHERE seq = 3")
        status, out, err = run_cli("audit", "--db", auditor)
        assert status == 1, err
        assert "rederive_mismatch" in out
    for left_out in ("compute_budget_origin", "compute_budget_checkpoints", "alembic_version"):
        name = f"auditor_{uuid.uuid4().hex[:8]}"
        statements = [line for line in grant_statements(name, Role.AUDITOR, database=_database(pg_url))
                      if f'"{left_out}"' not in line]
        with role_with(pg_url, statements, name) as auditor:
            status, out, err = run_cli("audit", "--db", auditor)
            assert (status, out) == (2, ""), left_out
            assert err.count("\n") == 1
            assert f"cannot read table {left_out}" in err
            assert f'GRANT SELECT ON TABLE public.{left_out} TO "{name}";' in err


@pytest.mark.postgres
@pytest.mark.slow
def test_a_writer_holding_exactly_the_printed_grants_records_and_signs(
    run_cli: Run, pg_url: str, tmp_path: object
) -> None:
    """After the owner's `migrate`, a writer role with the printed grants records, signs checkpoints (the
    sequence) and sets the origin; without INSERT on the tree's nodes it is refused before writing, naming it."""
    from pathlib import Path

    folder = Path(str(tmp_path))
    assert run_cli("migrate", "--db", pg_url)[0] == 0
    key = folder / "writer.key"
    assert run_cli("keygen", "writer", "--out", str(key))[0] == 0
    name = f"writer_{uuid.uuid4().hex[:8]}"
    printed = run_cli("grants", "--role", name, "--writer", "--db", _database(pg_url))[1].splitlines()
    with role_with(pg_url, printed, name) as writer:
        status, out, err = run_cli("record", EXAMPLES, "--db", writer, "--signing-key", str(key))
        assert status == 0, err
        assert "8 new" in out
        status, out, err = run_cli("audit", "--db", writer)
        assert status == 0, err
    name = f"writer_{uuid.uuid4().hex[:8]}"
    statements = [line.replace("SELECT, INSERT", "SELECT") if "compute_budget_tree_nodes" in line else line
                  for line in grant_statements(name, Role.WRITER)]
    with role_with(pg_url, statements, name) as writer:
        status, out, err = run_cli("record", EXAMPLES, "--db", writer)
        assert (status, out) == (2, "")
        assert f"role '{name}' cannot append to table compute_budget_tree_nodes" in err
        assert "GRANT SELECT, INSERT ON TABLE public.compute_budget_tree_nodes" in err


@pytest.mark.postgres
def test_a_writer_on_an_empty_database_is_told_the_schema_is_the_owners(run_cli: Run, pg_url: str) -> None:
    """A writer role recording into a database with no store yet: it used to be told 'only the owner can
    migrate', naming nothing. The line now gives the server's words (which object it may not use) and says to run
    migrate as the owner, then grants."""
    name = f"writer_{uuid.uuid4().hex[:8]}"
    statements = [f"GRANT CONNECT ON DATABASE \"{_database(pg_url)}\" TO {name}",
                  "REVOKE CREATE ON SCHEMA public FROM PUBLIC"]
    with role_with(pg_url, statements, name) as writer:
        status, out, err = run_cli("record", EXAMPLES, "--db", writer)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert "permission denied for schema public" in err
    assert "run `compute-budget migrate` as the owner" in err
    assert f"compute-budget grants --role {name} --writer" in err
