"""MySQL/MariaDB text judged by the guard against the real MariaDB 10.11 server and mysql client (issue #25): a
statement the guard calls read-only must change nothing on the server.

Each case is run by the real `mariadb` client (`--force`, so an error does not stop what follows) against a real
server started for the module, with a fingerprint taken before and after: every table's rows, the schema, the
accounts and their grants, the global variables, the files in a directory the server and the client may write, and,
in the same session, the user-level locks held at the end. Each case states what the server really does (`W`: it
changes something there; `R`: nothing) and whether the guard should call it read-only. Three properties:

- the guard calls it read-only => the fingerprint is unchanged (the differential property), with the server in its
  default sql_mode and, for text a backslash or a double quote could change, with NO_BACKSLASH_ESCAPES or
  ANSI_QUOTES set globally, which the guard cannot see;
- a `W` case does change the fingerprint (the oracle sees writes: the negative control of the harness);
- the guard's verdict is the one stated (so a fix cannot make everything opaque unnoticed).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from guardrail.actions import normalise
from tests.ports import free_port

pytestmark = pytest.mark.skipif(shutil.which("mariadb") is None or not Path("/usr/sbin/mariadbd").exists(),
                                reason="MariaDB 10.11 not installed (.ci/install-servers)")

# (sql, what the server does in its default mode: "W" changes something / "R" nothing, guard says read-only)
# {dir} is a directory the server and the client may write; {src} a file holding `DELETE FROM t`.
CASES: list[tuple[str, str, bool]] = [
    # -- is a comment only before whitespace or a control character; 1--1 is arithmetic.
    ("select 1--1", "R", True),
    ("select 1 --1\ndelete from t", "R", True),
    ("select 1;--\tx\ndelete from t", "W", False),
    ("select 1;-- x\ndelete from t", "W", False),
    ("DELETE--\tx\nFROM t", "W", False),
    ("select 1 -- x\rdelete from t", "R", True),  # CR does not end a -- comment
    ("select 1 # x\rdelete from t", "R", True),
    ("select 1;\rdelete from t", "W", False),
    ("select 1; # x\ndelete from t", "W", False),
    ("select 1 # ; delete from t", "R", True),
    ("DELETE#x\nFROM t", "W", False),
    ("DELETE/**/FROM t", "W", False),
    # No dollar quoting in MySQL: $$ is a word.
    ("select 1 $$; delete from t; $$", "W", False),
    ("select $$a; delete from t; $$", "W", False),
    # Strings: a backslash escapes in '...' and "..." (unless NO_BACKSLASH_ESCAPES); "..." is a string unless
    # ANSI_QUOTES; a backtick identifier takes no backslash escape.
    ("select \"a\\\"; delete from t; -- \"", "R", False),
    ("select 'a\\'; delete from t; -- '", "R", False),
    ("select 'a''; delete from t; -- '", "R", True),
    ("select N'a''; delete from t; -- '", "R", True),
    ("select _utf8mb4'a\\'; delete from t; -- '", "R", False),
    ("select `a\\`; delete from t; -- `", "W", False),
    ("select `a``; delete from t; -- `", "R", True),
    ("select x'41'; delete from t", "W", False),
    ("SELECT \"it's\"", "R", True),
    # Comments do not nest; /*+ hints are comments, whose quotes the client does not track.
    ("select 1 /* /* */; delete from t; /* */", "W", False),
    ("select 1 /* ; delete from t; */", "R", True),
    ("/*+ ' */ ; delete from t; -- '", "W", False),
    ("/* select 'x; */ ; delete from t; -- '", "W", False),
    # Executable comments: the content runs (/*!, /*!NNNNN up to the server's version, /*M!); MariaDB skips
    # 5-digit versions from 50700, and a quote in a skipped comment does not open a string.
    ("/*!50000 delete from t */", "W", False),
    ("/*!100000 delete from t */", "W", False),
    ("/*M!100000 delete from t */", "W", False),
    ("/*M! delete from t */", "W", False),
    ("/*!99999 delete from t */", "R", False),
    ("select 1; /*!99999 ' */ delete from t; -- '", "W", False),
    ("select 1 /*! , 2 */", "R", True),
    ("/*!40101 select 1 */", "R", True),
    ("select 1 /*! ; delete from t */", "R", False),
    ("DELETE FROM t /*!99999 WHERE id = 1 */", "W", False),
    # SET STATEMENT ... FOR runs its statement.
    ("SET STATEMENT max_statement_time=10 FOR DELETE FROM t", "W", False),
    ("SET STATEMENT sql_mode='' FOR UPDATE t SET v='x'", "W", False),
    # SQL from a string.
    ("EXECUTE IMMEDIATE 'DELETE FROM t'", "W", False),
    ("EXECUTE IMMEDIATE 'DELETE ' 'FROM t'", "W", False),
    ("EXECUTE IMMEDIATE CONCAT('DELETE', ' FROM t')", "W", False),
    ("EXECUTE IMMEDIATE 'EXECUTE IMMEDIATE ''DELETE FROM t'''", "R", False),  # refused by the server
    ("PREPARE p FROM 'DELETE FROM t'; EXECUTE p", "W", False),
    ("SET @q = 'DELETE FROM t'; PREPARE p FROM @q; EXECUTE p", "W", False),
    ("PREPARE p FROM 'SELECT 1'; EXECUTE p; DEALLOCATE PREPARE p", "R", True),
    ("EXECUTE IMMEDIATE 'SELECT 1'", "R", True),
    # The client's DELIMITER, and compound statements outside stored programs.
    ("DELIMITER //\nBEGIN NOT ATOMIC DELETE FROM t; END//", "W", False),
    ("DELIMITER //\nBEGIN NOT ATOMIC IF 1 THEN DELETE FROM t; END IF; END//", "W", False),
    ("delimiter $$\nselect 1$$ delete from t$$", "W", False),
    ("\\d //\nselect 1// delete from t//", "W", False),
    ("DELIMITER ;;\nselect 1;; delete from t;;", "W", False),
    # The client's own commands: \g ends a statement; \!, system, tee, source run or write something.
    ("select 1\\g delete from t", "W", False),
    ("select 1 \\G delete from t", "W", False),
    ("\\! touch {dir}/pwned1", "W", False),
    ("system touch {dir}/pwned2", "W", False),
    ("select 1; system touch {dir}/pwned3", "W", False),
    ("select 1 \\! touch {dir}/pwned4", "W", False),
    ("select 'system touch x'", "R", True),
    ("tee {dir}/tee1.txt\nselect 1", "R", False),  # ignored in batch mode
    ("\\T {dir}/tee2.txt\nselect 1", "R", False),  # ignored in batch mode
    ("source {src}", "W", False),
    ("\\. {src}", "W", False),
    ("select 1; \\. {src}", "W", False),
    # Functions with an effect: sequences, stored functions, lock functions (checked in the session: see PROBE).
    ("SELECT NEXTVAL(s)", "W", False),
    ("SELECT NEXT VALUE FOR s", "W", False),
    ("DO SETVAL(s, 100)", "W", False),
    ("SELECT LASTVAL(s)", "R", True),
    ("SELECT d.f()", "W", False),
    ("DO d.f()", "W", False),
    ("DO 1", "R", True),
    ("DO GET_LOCK('x', 0)", "W", False),
    ("SELECT GET_LOCK('x', 0)", "W", False),
    ("SELECT 1 FROM dual WHERE GET_LOCK('y', 0)", "W", False),
    # HANDLER reads; LOAD DATA and INTO OUTFILE / DUMPFILE write.
    ("HANDLER t OPEN; HANDLER t READ FIRST; HANDLER t CLOSE", "R", True),
    ("LOAD DATA INFILE '{dir}/rows.csv' INTO TABLE t", "W", False),
    ("SELECT * FROM t INTO OUTFILE '{dir}/o1.txt'", "W", False),
    ("SELECT 1 INTO DUMPFILE '{dir}/o2.txt'", "W", False),
    ("SELECT * INTO OUTFILE '{dir}/o3.txt' FROM t", "W", False),
    ("WITH x AS (SELECT 1) SELECT * FROM x INTO OUTFILE '{dir}/o5.txt'", "W", False),
    # sql_mode set in the session changes how the rest is read.
    ("SET sql_mode='NO_BACKSLASH_ESCAPES'; SELECT 'a\\'; DELETE FROM t; -- '", "W", False),
    ("SET sql_mode='ANSI_QUOTES'; SELECT \"a\\\"; DELETE FROM t; -- \"", "W", False),
    ("SET @@session.sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES'); SELECT 'a\\'; DELETE FROM t; -- '",
     "W", False),
    ("/*!40101 SET sql_mode='NO_BACKSLASH_ESCAPES' */; SELECT 'a\\'; DELETE FROM t; -- '", "W", False),
    ("SET sql_mode=''; SELECT 'a\\'; DELETE FROM t; -- '", "R", False),
    # A multi-byte client character set: the backslash after a non-ASCII character is part of it.
    ("SET NAMES gbk; SELECT '\u4e2d\\'; DELETE FROM t; -- '", "W", False),
    # Plain writes and reads, as a baseline.
    ("ANALYZE DELETE FROM t", "W", False),
    ("CREATE OR REPLACE TABLE t2 AS SELECT 1", "W", False),
    ("GRANT SELECT ON d.* TO 'app'@'%'", "W", False),
    ("SET GLOBAL max_connections = 152", "W", False),
    ("RENAME TABLE t TO t3", "W", False),
    ("INSERT INTO t VALUES (3,'c') ON DUPLICATE KEY UPDATE v='d'", "W", False),
    ("SELECT 1 INTO @v; DELETE FROM t WHERE id = 1", "W", False),
    ("CALL d.p()", "W", False),
    ("SHOW TABLES; DESCRIBE t; EXPLAIN SELECT * FROM t", "R", True),
    ("SELECT * FROM t WHERE v = 'a' -- \nORDER BY id", "R", True),
    ("SELECT COUNT(*) FROM t; SELECT @@version", "R", True),
]

SETUP = """
DROP DATABASE IF EXISTS d; CREATE DATABASE d; USE d;
CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20)); INSERT INTO t VALUES (1, 'a'), (2, 'b');
CREATE TABLE u (id INT); CREATE SEQUENCE s;
DELIMITER //
CREATE FUNCTION f() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO u VALUES (1); RETURN 1; END//
DELIMITER ;
CREATE PROCEDURE p() DELETE FROM t;
CREATE USER IF NOT EXISTS 'app'@'%'; REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'app'@'%';
SET GLOBAL max_connections = 151;
"""
FINGERPRINT = """
SELECT table_schema, table_name, table_type FROM information_schema.tables
 WHERE table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1, 2;
CHECKSUM TABLE d.t, d.u; SELECT * FROM d.s;
SELECT user, host, priv FROM mysql.global_priv ORDER BY 1, 2; SHOW GRANTS FOR 'app'@'%';
SELECT variable_name, variable_value FROM information_schema.global_variables
 WHERE variable_name NOT IN ('GTID_BINLOG_POS', 'GTID_CURRENT_POS', 'GTID_BINLOG_STATE', 'GTID_SLAVE_POS')
 ORDER BY 1;
"""
# Asked in the case's own session after it: the user-level locks it still holds.
PROBE = "\n;\nSELECT 'PROBE', IS_USED_LOCK('x') IS NOT NULL, IS_USED_LOCK('y') IS NOT NULL;\n"


@pytest.fixture(scope="module")
def server():
    from arena.live.names import Endpoint
    from arena.live.servers import MariaDBServer

    # Not under pytest's 0700 tmp dir: the server runs as the mysql user when we are root.
    base = Path(tempfile.mkdtemp(prefix="guardrail-oracle-"))
    base.chmod(0o755)
    srv = MariaDBServer(Endpoint("oracle", "127.0.0.1", free_port()), base)
    srv.start()
    outdir = base / "out"
    outdir.mkdir()
    outdir.chmod(0o777)  # the server writes here as its own user
    (outdir / "rows.csv").write_text("5\tx\n6\ty\n")
    src = base / "delete.sql"
    src.write_text("DELETE FROM t;\n")
    try:
        yield srv, outdir, src
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)


def _client(srv, *args: str, stdin: str | None = None, cwd: Path | None = None, check: bool = True) -> str:
    r = subprocess.run(["mariadb", f"--socket={srv.socket_path}", "-uroot", "--batch", *args], input=stdin,
                       capture_output=True, text=True, timeout=60, cwd=cwd)
    if check and r.returncode != 0:
        raise AssertionError(f"the oracle's own SQL failed: {r.stderr}")
    return r.stdout


def _fingerprint(srv, outdir: Path) -> str:
    files = sorted(p.name for p in outdir.iterdir())
    return _client(srv, "-e", FINGERPRINT) + "\n".join(files)


def _run(srv, outdir: Path, src: Path, sql: str, sql_mode: str | None) -> tuple[str, str, bool]:
    """The fingerprint before and after running `sql`, and whether the session held a user lock at its end."""
    _client(srv, stdin=SETUP)
    _client(srv, "-e", f"SET GLOBAL sql_mode = '{sql_mode}'" if sql_mode is not None else
            "SET GLOBAL sql_mode = DEFAULT")
    for p in outdir.iterdir():
        if p.name != "rows.csv":
            p.unlink()
    before = _fingerprint(srv, outdir)
    out = _client(srv, "--force", "d", stdin=sql + PROBE, cwd=outdir, check=False)
    locked = any(line.startswith("PROBE") and "1" in line.split("\t")[1:] for line in out.splitlines())
    after = _fingerprint(srv, outdir)
    _client(srv, "-e", "SET GLOBAL sql_mode = DEFAULT")
    return before, after, locked


def _text(sql: str, outdir: Path, src: Path) -> str:
    return sql.replace("{dir}", str(outdir)).replace("{src}", str(src))


def _read_only(cmd: str) -> bool:
    return all(a.mutating is False for a in normalise(cmd))


@pytest.mark.parametrize("sql,does,read_only", CASES, ids=[c[0][:60] for c in CASES])
def test_a_statement_the_guard_calls_read_only_changes_nothing_on_the_server(server, sql, does, read_only):
    srv, outdir, src = server
    text = _text(sql, outdir, src)
    guard_ro = {form: _read_only(cmd) for form, cmd in (
        ("-e", f"mysql -h mariadb d -e {shlex.quote(text)}"),
        ("stdin", f"mysql -h mariadb d <<'EOF'\n{text}\nEOF"))}
    modes = [None] + (["NO_BACKSLASH_ESCAPES", "ANSI_QUOTES"] if "\\" in text or '"' in text else [])
    for mode in modes:
        before, after, locked = _run(srv, outdir, src, text, mode)
        changed = before != after or locked
        if mode is None:
            assert changed == (does == "W"), f"the server {'changed' if changed else 'kept'} its state: {sql!r}"
        for form, ro in guard_ro.items():
            assert not (ro and changed), f"allowed as read-only ({form}) but it changed the server " \
                                         f"(sql_mode {mode or 'default'}): {sql!r}"
    assert guard_ro == {"-e": read_only, "stdin": read_only}, sql


def test_the_cases_are_many_and_cover_both_verdicts():
    assert len(CASES) >= 60
    assert {does for _, does, _ in CASES} == {"W", "R"}
    assert any(ro for *_, ro in CASES) and any(not ro for *_, ro in CASES)


# `ON *` grants on the default database, which the client's -D/positional database or a USE selects. With none
# selected MariaDB 10.11 refuses (ERROR 1046) and MySQL 5.7 grants at the global level: the guard reads the broadest,
# `*.*`. (client arguments, SQL) -> the guard's `on` must name what the server's SHOW GRANTS then shows.
GRANT_SCOPE_CASES: list[tuple[tuple[str, ...], str]] = [
    (("d",), "GRANT SELECT ON * TO 'scope_u'@'%'"),
    (("--database=d",), "GRANT SELECT ON * TO 'scope_u'@'%'"),
    ((), "GRANT SELECT ON * TO 'scope_u'@'%'"),
    ((), "USE e; GRANT SELECT ON * TO 'scope_u'@'%'"),
    ((), "GRANT SELECT ON * TO 'scope_u'@'%'; USE e"),
    (("d",), "USE e; GRANT SELECT ON * TO 'scope_u'@'%'"),
    (("d",), "GRANT SELECT ON d.* TO 'scope_u'@'%'"),
]


@pytest.mark.parametrize("args,sql", GRANT_SCOPE_CASES, ids=[" ".join([*c[0], c[1]])[:60] for c in GRANT_SCOPE_CASES])
def test_a_grant_on_star_names_the_scope_the_server_grants(server, args, sql):
    srv, _, _ = server
    _client(srv, "-e", "CREATE DATABASE IF NOT EXISTS d; CREATE DATABASE IF NOT EXISTS e; "
                       "DROP USER IF EXISTS 'scope_u'@'%'; CREATE USER 'scope_u'@'%'")
    try:
        run = subprocess.run(["mariadb", f"--socket={srv.socket_path}", "-uroot", *args, "-e", sql],
                             capture_output=True, text=True, timeout=60)
        refused = "ERROR 1046" in run.stderr
        assert run.returncode == 0 or refused, run.stderr
        shown = [line.split(" ON ", 1)[1].split(" TO ", 1)[0].replace("`", "")
                 for line in _client(srv, "-N", "-e", "SHOW GRANTS FOR 'scope_u'@'%'").splitlines()
                 if line.startswith("GRANT SELECT")]
        guard = [a.details.get("on") for a in normalise(shlex.join(["mysql", *args, "-e", sql]))
                 if a.details.get("sql_kind") == "grant"]
        if refused:  # no database selected: nothing granted here, the global grant on MySQL 5.7
            assert shown == [] and guard == ["*.*"], (shown, guard)
        else:
            assert len(shown) == 1 and guard == shown, (shown, guard)
    finally:
        _client(srv, "-e", "DROP USER IF EXISTS 'scope_u'@'%'")
