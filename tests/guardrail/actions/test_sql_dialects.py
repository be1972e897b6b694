"""SQL that the client or server runs though it looks like a comment, a string or a read (red-team findings):
MySQL executable comments and --init-command, client commands in the middle of a line, EXPLAIN ANALYZE in its
option-list form, and PostgreSQL standard strings, where a backslash does not escape the closing quote."""

from __future__ import annotations

import pytest

from guardrail.actions import normalise
from guardrail.actions.model import UNKNOWN

CASES = [
    # MySQL/MariaDB run the body of /*! ... */, /*!NNNNN ... */ and /*M! ... */.
    ('mysql -e "/*! DROP TABLE t */"', [("drop", True)]),
    ('mysql -e "/*!50000 DELETE FROM t */"', [("delete", True)]),
    ('mysql -e "SELECT 1; /*M!100000 TRUNCATE t */"', [("select", False), ("truncate", True)]),
    ('mysql -e "SELECT 1 /* a plain comment */"', [("select", False)]),
    # --init-command is SQL the client runs on connecting.
    ("mysql --init-command='DROP TABLE t' -e 'SELECT 1'", [("drop", True), ("select", False)]),
    # The client's own commands, anywhere in a statement: \! runs a shell, system too; \G only ends the statement.
    ('mysql -e "SELECT 1 \\! redis-cli flushall"', [("\\!", UNKNOWN)]),
    ("mysql -e 'system ls'", [("system", UNKNOWN)]),
    ("mysql -e 'SELECT * FROM t\\G'", [("select", False)]),
    # psql: a backslash outside quotes begins a meta-command wherever it stands on the line.
    ("psql <<'EOF'\nSELECT format('DROP TABLE %I', tablename) FROM pg_tables \\gexec\nEOF",
     [("select", False), ("\\gexec", UNKNOWN)]),
    ("psql <<'EOF'\nSELECT 1 \\! redis-cli flushall\nEOF", [("select", False), ("\\!", UNKNOWN)]),
    ("psql <<'EOF'\nSELECT 'redis-cli flushall' \\g |sh\nEOF", [("select", False), ("\\g", UNKNOWN)]),
    # EXPLAIN ANALYZE runs the statement, in the option-list form too; with the statement not in the text, unknown.
    ("psql -c 'EXPLAIN (ANALYZE) DELETE FROM messages'", [("delete", True)]),
    ("psql -c 'EXPLAIN (ANALYZE true, FORMAT json) UPDATE s SET x = 0'", [("update", True)]),
    ("psql -v q='DELETE FROM m' <<< 'EXPLAIN ANALYZE :q'", [("explain", UNKNOWN)]),
    ("psql -c 'EXPLAIN SELECT 1'", [("explain", False)]),
    # PostgreSQL standard strings: 'a\' ends at the quote, so the DROP after it runs.
    ("psql -c \"SELECT 'a\\'; DROP TABLE x; --'\"", [("select", False), ("drop", True)]),
    ("psql -c \"SELECT E'a\\'b'; SELECT 2\"", [("select", False), ("select", False)]),
    ("psql -c \"SELECT 'it''s'; SELECT 2\"", [("select", False), ("select", False)]),
]


@pytest.mark.parametrize("cmd,expected", CASES, ids=[c for c, _ in CASES])
def test_what_the_sql_really_does(cmd, expected):
    assert [(a.verb, a.mutating) for a in normalise(cmd)] == expected
