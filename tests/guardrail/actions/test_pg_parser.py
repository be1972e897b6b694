"""The psql classifier reads SQL through PostgreSQL's own parser (guardrail/actions/classifiers/pgsql.py, pgwhere.py,
guardrail/clients/pgquery.py): the adversarial corpus (pg_adversarial.yaml), the canonical readings, the WHERE
check, psql's variables and the settings that change lexing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from guardrail.actions.classifiers.pgsql import FUNCTIONS, read_sql
from guardrail.actions.classifiers.postgres import pg_effect
from guardrail.actions.model import UNKNOWN
from guardrail.actions.normalise import normalise
from guardrail.clients.pgquery import SqlSyntaxError, parse

CORPUS = yaml.safe_load((Path(__file__).with_name("pg_adversarial.yaml")).read_text(encoding="utf-8"))


def reads_only(cmd: str) -> bool:
    actions = normalise(cmd)
    return bool(actions) and all(a.mutating is False for a in actions)


def test_the_corpus_is_large_enough_to_mean_something():
    assert len(CORPUS) >= 100
    assert sum(c["read"] for c in CORPUS) >= 35 and sum(not c["read"] for c in CORPUS) >= 60


@pytest.mark.parametrize("case", CORPUS, ids=[c["cmd"][:70] for c in CORPUS])
def test_the_guard_reads_each_adversarial_command_as_the_server_does(case):
    assert reads_only(case["cmd"]) is case["read"], [(a.verb, a.mutating, a.opaque_reason)
                                                     for a in normalise(case["cmd"])]


def test_a_text_the_parser_rejects_is_one_opaque_action_not_a_split_guess():
    (a,) = normalise("psql -c 'SELECT 1; DELET FROM t; SELECT 2'")
    assert a.mutating == UNKNOWN and "parser does not accept" in a.opaque_reason


def test_unicode_escaped_names_are_read_decoded():
    (a,) = normalise("psql -c 'SELECT rolpassword FROM U&\"pg_aut\\0068id\"'")
    assert a.details["catalogs"] == ["pg_authid"]
    (a,) = normalise("psql -c 'ALTER SYSTEM SET U&\"fsyn\\0063\" = of'")
    assert [(k.key, k.value) for k in a.keys] == [("postgres.fsync", "off")]


def test_the_rules_read_the_statement_as_written_without_its_comments():
    (a,) = normalise("psql -c 'ALTER TABLE users /* x */ DROP/**/COLUMN email'")
    assert a.details["statement"] == "ALTER TABLE users DROP COLUMN email"


def test_explain_analyze_is_judged_by_the_statement_it_runs():
    (a,) = normalise("psql -c 'EXPLAIN (ANALYZE, FORMAT json) DELETE FROM m WHERE id = 3'")
    assert (a.verb, a.mutating, a.details["explain_analyze"], a.details["has_where"]) == ("delete", True, True, True)
    (a,) = normalise("psql -c 'EXPLAIN (ANALYZE false) DELETE FROM m'")
    assert (a.verb, a.mutating) == ("explain", False)


@pytest.mark.parametrize("sql", ["COMMIT PREPARED 'a'", "ROLLBACK PREPARED 'a'", "PREPARE TRANSACTION 'a'",
                                 "commit   prepared   'a'"])
def test_prepared_transactions_are_opaque_not_skipped_as_transaction_control(sql):
    (a,) = normalise(f'psql -c "{sql}"')
    assert a.mutating == UNKNOWN and "prepared transaction" in a.opaque_reason


def test_a_volatile_function_the_list_calls_a_change_makes_the_read_a_change():
    (a,) = normalise("psql -c 'SELECT id FROM t WHERE pg_try_advisory_xact_lock_shared(id)'")
    assert (a.verb, a.mutating, a.details["changes_state"]) == ("pg_try_advisory_xact_lock_shared", True,
                                                               "pg_try_advisory_xact_lock_shared")


def test_sql_given_to_a_function_as_text_is_read_like_any_other():
    assert reads_only("psql -c \"SELECT query_to_xml('SELECT 1', true, false, '')\"")
    (a,) = normalise("psql -c \"SELECT query_to_xml('SELECT 1; DROP TABLE t', true, false, '')\"")
    assert a.mutating == UNKNOWN
    (a,) = normalise("psql -c \"SELECT query_to_xml(current_setting('x'), true, false, '')\"")
    assert a.mutating == UNKNOWN and "computed" in a.opaque_reason


def test_sql_nested_in_sql_is_read_only_so_deep():
    inner = "SELECT 1"
    for _ in range(6):
        inner = "SELECT query_to_xml(" + "'" + inner.replace("'", "''") + "'" + ", true, false, '')"
    got = read_sql(inner, pg_effect)
    assert got.statements[0].effect.mutating == UNKNOWN


def test_the_function_lists_do_not_overlap():
    assert not FUNCTIONS.reads_only & FUNCTIONS.changes_state
    assert set(FUNCTIONS.runs_sql_text) <= FUNCTIONS.changes_state


@pytest.mark.parametrize("cond,narrows", [
    ("id = 4", True), ("status = 'done'", True), ("id IN (1, 2)", True), ("m.id = s.id", True),
    ("created_at < now() - interval '1 day'", True), ("x IS NULL", True), ("deleted_at IS NOT NULL", True),
    ("NOT (id = 1)", True), ("id = 1 AND true", True), ("1 > 2 OR id = 4", True), ("lower(email) = 'a@b'", True),
    ("EXISTS (SELECT 1 FROM u WHERE u.id = m.uid)", True), ("uid IN (SELECT id FROM banned)", True),
    ("name ~ '^a'", True), ("id BETWEEN 1 AND 10", True), ("false", True),
    # every row
    ("true", False), ("1 = 1", False), ("'a' = 'a'", False), ("1 IN (1)", False), ("NOT false", False),
    ("id = id", False), ("x >= x", False), ("id = m.id", False), ("coalesce(x, 0) = coalesce(x, 0)", False),
    ("x IS NOT DISTINCT FROM x", False), ("id > 0", False), ("0 < id", False), ("id >= -3", False),
    ("id <> -1", False), ("id IS NOT NULL", False), ("(id = 1) IS NOT NULL", False), ("NOT (id IS NULL)", False),
    ("name LIKE '%'", False), ("name ILIKE '%%'", False), ("name ~ ''", False), ("name ~ '.*'", False),
    ("EXISTS (SELECT 1)", False), ("id IN (SELECT id FROM m)", False), ("id BETWEEN 0 AND 2147483647", False),
    ("id = 1 OR 1 = 1", False), ("status = 'x' OR id > 0", False), ("now() > '2000-01-01'", False),
])
def test_a_where_counts_only_when_it_really_narrows(cond, narrows):
    (a,) = normalise(f'psql -c "DELETE FROM m WHERE {cond}"')
    assert a.details["has_where"] is narrows
    (a,) = normalise(f'psql -c "UPDATE m SET x = 1 WHERE {cond}"')
    assert a.details["has_where"] is narrows


def test_psql_variables_are_applied_where_psql_applies_them():
    # stdin is interpolated; -c text is sent as it is (psql 15), where :x is the server's syntax error.
    assert [a.verb for a in normalise("psql -X -v t=m <<< 'DELETE FROM :t WHERE id = 1'")] == ["delete"]
    (a,) = normalise("psql -X -v t=m <<< 'DELETE FROM :t WHERE id = 1'")
    assert a.details["table"] == "m" and a.details["has_where"] is True
    (a,) = normalise("psql -v t=m -c 'DELETE FROM :t'")
    assert a.mutating == UNKNOWN
    (a,) = [a for a in normalise("psql -X -v t=\"$(cat f)\" <<< 'SELECT * FROM :t'") if a.tool == "psql"]
    assert a.mutating == UNKNOWN


def test_after_a_change_of_lexing_the_rest_is_opaque_across_texts():
    acts = normalise("psql -c 'SET standard_conforming_strings TO off' -c 'SELECT 1' -c 'SELECT 2'")
    assert [a.mutating for a in acts] == [True, UNKNOWN, UNKNOWN]
    acts = normalise("psql -c \"SET standard_conforming_strings = 'on'; SELECT 1\"")
    assert [a.mutating for a in acts] == [True, False]
    (a,) = normalise("psql -c 'ALTER ROLE app SET standard_conforming_strings = off'")
    assert a.mutating == UNKNOWN


def test_a_deeply_nested_expression_is_refused_not_a_crash():
    assert reads_only("psql -c 'SELECT " + "(" * 5000 + "1" + ")" * 5000 + "'")  # parentheses nest no nodes
    (a,) = normalise("psql -c 'SELECT " + "abs(" * 3000 + "1" + ")" * 3000 + "'")
    assert a.mutating == UNKNOWN


def test_the_client_reports_the_parsers_errors_and_the_written_text():
    with pytest.raises(SqlSyntaxError):
        parse("SELECT FROM WHERE")
    got = parse("SELECT 1 -- a\r; /* x */ SELECT  'a  b'")
    assert [p.text for p in got] == ["SELECT 1", "SELECT 'a  b'"]
    assert [p.node_type for p in got] == ["SelectStmt", "SelectStmt"]


def test_psql_f_reads_its_files_now_and_judges_them_as_psql_reads_them(tmp_path):
    """`psql -f FILE` is judged on FILE's text, read at decision time (each -f in order), as psql reads it: SQL,
    meta-commands and :variables; a file that cannot be read now, or -f beside -c or stdin, stays opaque."""
    from guardrail.actions import normalise

    def verdicts(cmd: str) -> list[tuple[str, object]]:
        return [(a.verb, a.mutating) for a in normalise(cmd)]

    reads = tmp_path / "reads.sql"
    reads.write_text("SELECT 1;\n\\dt\nSELECT now(), count(*) FROM pg_stat_activity;\n")
    writes = tmp_path / "writes.sql"
    writes.write_text("SELECT 1;\nDELETE FROM guard.audit;\n")
    shell = tmp_path / "shell.sql"
    shell.write_text("SELECT 1 \\! touch /tmp/x\n")
    var = tmp_path / "var.sql"
    var.write_text("SELECT 1; :q\n")
    assert all(m is False for _, m in verdicts(f"psql -X -f {reads}"))  # the negative control
    assert ("delete", True) in verdicts(f"psql -f {writes}")
    assert ("delete", True) in verdicts(f"psql -f {reads} --file={writes}")
    assert ("\\!", UNKNOWN) in verdicts(f"psql -f {shell}")
    assert ("delete", True) in verdicts(f"psql -X -v q='DELETE FROM guard.audit' -f {var}")
    for opaque in (f"psql -f {tmp_path / 'missing.sql'}", "psql -f /dev/zero", f"psql -f {tmp_path}",
                   f"psql -c 'SELECT 1' -f {reads}", f"psql -f {reads} -f - <<< 'SELECT 1'"):
        assert ("run file", UNKNOWN) in verdicts(opaque), opaque
