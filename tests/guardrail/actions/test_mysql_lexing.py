"""MySQL/MariaDB text read as the mysql client and the server read it (guardrail/actions/classifiers/mysqllex.py),
class by class, with variants beyond the examples of issue #25; the real-server check of the same classes is
test_mysql_server_oracle.py."""

from __future__ import annotations

import os
import shlex

import pytest

from guardrail.actions import normalise
from guardrail.actions.classifiers.mysqllex import Mode, readings, server_statements
from guardrail.actions.model import UNKNOWN


def verbs(sql: str, *opts: str) -> list[tuple[str, object]]:
    return [(a.verb, a.mutating) for a in normalise(f"mysql {' '.join(opts)} -e {shlex.quote(sql)}".strip())]


def read_only(sql: str, *opts: str) -> bool:
    return all(m is False for _, m in verbs(sql, *opts))


# -- comments ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("after", [" ", "\t", "\x0b", "\x0c", "\r", "\x01", "\x1f", "\x7f"])
def test_double_dash_before_whitespace_or_a_control_character_is_a_comment(after):
    assert [s.text for s in server_statements(f"SELECT 1 --{after}x\nDELETE FROM t", Mode(), {})] == \
        [f"SELECT 1 --{after}x\nDELETE FROM t"]
    assert [v for v, _ in verbs(f"SELECT 1;--{after}x\nDELETE FROM t")] == ["select", "delete"]


@pytest.mark.parametrize("expr", ["1--1", "1 --1", "a--b", "1---1", "--1", "1--'x'"])
def test_double_dash_before_anything_else_is_two_minus_signs(expr):
    (st,) = server_statements(f"SELECT {expr}; DELETE FROM t", Mode(), {})[:1]
    assert [t.text for t in st.toks][:2] == ["SELECT", expr[0] if expr[0] != "-" else "-"]
    assert [v for v, _ in verbs(f"SELECT {expr}; DELETE FROM t")] == ["select", "delete"]


@pytest.mark.parametrize("comment", ["-- x\r", "# x\r", "-- x\r\r", "#\r"])
def test_a_carriage_return_does_not_end_a_line_comment(comment):
    assert verbs(f"SELECT 1; {comment}DELETE FROM t") == [("select", False)]
    assert [v for v, _ in verbs(f"SELECT 1; {comment}\nDELETE FROM t")] == ["select", "delete"]


@pytest.mark.parametrize("sql", ["SELECT 1 /* /* */; DELETE FROM t; /* */", "SELECT 1 /* /* /* */; DELETE FROM t",
                                 "SELECT 1 /**/; DELETE FROM t", "SELECT 1 /*/ */; DELETE FROM t"])
def test_comments_do_not_nest(sql):
    assert ("delete", True) in verbs(sql)


@pytest.mark.parametrize("sql", ["SELECT 1 # ; DELETE FROM t", "SELECT 1 /* ; DELETE FROM t */",
                                 "SELECT 1 -- ; DELETE FROM t", "SELECT 1 #\\! touch x"])
def test_what_a_comment_holds_does_not_run(sql):
    assert verbs(sql) == [("select", False)]


# -- strings and quoting ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("sql", ["SELECT $$; DELETE FROM t; $$", "SELECT 1 $$; DELETE FROM t; $$",
                                 "SELECT $a$; DELETE FROM t; $a$", "SELECT $$a; DELETE FROM t; $$"])
def test_there_is_no_dollar_quoting(sql):
    assert ("delete", True) in verbs(sql)


@pytest.mark.parametrize("q", ["'", '"'])
def test_a_backslash_escapes_in_both_string_quotes_and_every_sql_mode_is_read(q):
    sql = f"SELECT {q}a\\{q}; DELETE FROM t; -- {q}"
    # in the default mode it is one string; with NO_BACKSLASH_ESCAPES (or ANSI_QUOTES for ") the DELETE runs,
    # and the server's mode is not known: the DELETE is judged
    assert ("delete", True) in verbs(sql)
    assert [type(s).__name__ for s in readings([(sql, True)])[0]] == ["Statement"]


def test_text_without_a_backslash_or_a_double_quote_has_one_reading():
    assert len(readings([("SELECT 'a'; SELECT `b`", True)])) == 1
    assert read_only("SELECT 'it''s', `a``b`, N'x', X'41', _utf8mb4'y'")


@pytest.mark.parametrize("sql", ["SELECT `a\\`; DELETE FROM t; -- `", "SELECT 1 FROM `t\\`; DELETE FROM t; #`"])
def test_a_backtick_identifier_takes_no_backslash_escape(sql):
    assert ("delete", True) in verbs(sql)


@pytest.mark.parametrize("sql", ["SET NAMES gbk; SELECT '\u4e2d\\'; DELETE FROM t; -- '",
                                 "SELECT '\u00e9\\'; DELETE FROM t; -- '", "SELECT `\u4e2d`; DELETE FROM t"])
def test_a_non_ascii_character_before_a_backslash_or_backtick_is_opaque(sql):
    assert verbs(sql) == [("query", UNKNOWN)]


def test_non_ascii_text_in_a_multibyte_client_charset_is_opaque():
    assert verbs("SELECT '\u4e2d'", "--default-character-set=gbk") == [("query", UNKNOWN)]
    assert verbs("SELECT '\u4e2d'", "--default-character-set=utf8mb4") == [("select", False)]
    assert verbs("SELECT 'x'", "--default-character-set=sjis") == [("select", False)]


# -- executable comments -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opener", ["/*!", "/*!50000", "/*!050000", "/*!100000", "/*!99999", "/*M!", "/*M!100000",
                                    "/*M!999999", "/*!999999"])
def test_the_content_of_an_executable_comment_is_judged_whatever_its_version(opener):
    assert ("delete", True) in verbs(f"SELECT 1; {opener} DELETE FROM t */")


@pytest.mark.parametrize("sql", ["SELECT 1; /*!99999 ' */ DELETE FROM t; -- '",
                                 "SELECT 1; /*!80000 ' */ DELETE FROM t; -- '",
                                 "SELECT 1; /*M!999999 \" */ DELETE FROM t; -- \"",
                                 "DELETE FROM t /*!99999 WHERE id = 1 */"])
def test_a_versioned_comment_is_also_read_as_skipped(sql):
    got = [a for a in normalise(f"mysql -e {shlex.quote(sql)}") if a.verb == "delete"]
    assert any(a.details.get("has_where") is not True for a in got), [a.details for a in got]


def test_a_skipped_versioned_comment_may_hold_one_nested_comment():
    sts = server_statements("/*!99999 a /* b */ c */ SELECT 1", Mode(), {("", "99999"): False})
    assert [s.text for s in sts] == ["/*!99999 a /* b */ c */ SELECT 1"] and sts[0].kw(0) == "SELECT"


def test_too_many_versions_to_read_every_way_is_opaque():
    sql = " ".join(f"/*!{40000 + i} SELECT 1 */;" for i in range(40))
    assert verbs(sql) == [("query", UNKNOWN)]


# -- sql_mode --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", ["SET sql_mode='NO_BACKSLASH_ESCAPES'", "SET SESSION sql_mode = 'no_backslash_escapes'",
                                     "SET @@sql_mode = 'STRICT_TRANS_TABLES,NO_BACKSLASH_ESCAPES'",
                                     "SET @@session.sql_mode='NO_BACKSLASH_ESCAPES'",
                                     "SET LOCAL sql_mode='NO_BACKSLASH_ESCAPES'",
                                     "/*!40101 SET sql_mode='NO_BACKSLASH_ESCAPES' */"])
def test_a_literal_sql_mode_is_applied_to_what_follows(setting):
    got = verbs(f"{setting}; SELECT 'a\\'; DELETE FROM t; -- '")
    assert ("delete", True) in got and ("query", UNKNOWN) not in got


@pytest.mark.parametrize("setting", ["SET sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')",
                                     "SET sql_mode = @m", "SET sql_mode = 'ORACLE'", "SET @@sql_mode = 'MSSQL'"])
def test_an_sql_mode_the_guard_cannot_read_makes_what_follows_opaque(setting):
    assert ("query", UNKNOWN) in verbs(f"{setting}; SELECT 1")
    assert ("query", UNKNOWN) not in verbs(setting)  # nothing follows: nothing to misread


def test_set_global_and_set_statement_sql_mode_do_not_change_this_session():
    assert ("query", UNKNOWN) not in verbs("SET GLOBAL sql_mode = CONCAT(@@sql_mode, ',ANSI'); SELECT 1")
    assert ("query", UNKNOWN) not in verbs("SET STATEMENT sql_mode = 'ANSI' FOR SELECT 1; SELECT 2")


# -- the client: delimiters and commands ---------------------------------------------------------------------------
@pytest.mark.parametrize("sql", ["DELIMITER //\nBEGIN NOT ATOMIC DELETE FROM t; END//",
                                 "delimiter $$\nBEGIN NOT ATOMIC IF 1 THEN DELETE FROM t; END IF; END$$",
                                 "\\d //\nBEGIN NOT ATOMIC WHILE 1 DO DELETE FROM t; END WHILE; END//",
                                 "DELIMITER ;;\nSELECT 1;; DELETE FROM t;;"])
def test_a_delimiter_set_in_the_client_is_followed(sql):
    assert ("delete", True) in verbs(sql)


def test_the_delimiter_option_is_followed():
    assert [v for v, _ in verbs("SELECT 1// DELETE FROM t//", "--delimiter=//")] == ["select", "delete"]


@pytest.mark.parametrize("sql,command", [
    ("\\! touch x", "system"), ("SELECT 1 \\! touch x", "system"), ("system touch x", "system"),
    ("SELECT 1; system touch x", "system"), ("SYSTEM touch x", "system"), ("source /tmp/x.sql", "source"),
    ("\\. /tmp/x.sql", "source"), ("SELECT 1; \\. /tmp/x.sql", "source"), ("pager sh", "pager"),
    ("\\P sh", "pager"), ("tee /tmp/x", "tee"), ("\\T /tmp/x", "tee"), ("edit", "edit"), ("\\e", "edit"),
    ("connect d other-host", "connect"), ("\\r d other-host", "connect"), ("charset gbk", "charset"),
    ("\\C gbk", "charset"), ("SELECT 1 /*! \\! touch x */", "system"),
])
def test_the_clients_own_commands_are_opaque(sql, command):
    assert (command, UNKNOWN) in verbs(sql)


@pytest.mark.parametrize("sql", ["SELECT '\\! touch x'", "SELECT 'system touch x'", "SELECT \"\\. /tmp/x\"",
                                 "SELECT 1 -- \\! touch x", "SELECT * FROM t\\G", "SELECT 1\\g", "use d", "\\u d",
                                 "SELECT 1;\nstatus", "\\s"])
def test_what_only_looks_like_a_client_command_is_not_one(sql):
    assert read_only(sql), verbs(sql)


@pytest.mark.parametrize("sql", ["SELECT 1\\g DELETE FROM t", "SELECT 1 \\G DELETE FROM t",
                                 "SELECT 1\\gDELETE FROM t"])
def test_a_statement_ended_by_a_client_terminator_is_followed_by_the_next(sql):
    assert ("delete", True) in verbs(sql)


@pytest.mark.parametrize("opt", ["-c", "--comments"])
def test_comments_kept_by_the_client_are_read_by_the_server(opt):
    assert ("delete", True) in verbs("SELECT 1 /* /* */; DELETE FROM t; /* */", opt)
    assert verbs("SELECT 1 /* ; DELETE FROM t; */", opt) == [("select", False)]


# -- statements --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sql,verb", [
    ("SET STATEMENT max_statement_time=1 FOR DELETE FROM t", "delete"),
    ("SET STATEMENT a=1, b='x' FOR UPDATE t SET v = 1", "update"),
    ("SET STATEMENT sql_mode='' FOR DROP TABLE t", "drop"),
    ("EXECUTE IMMEDIATE 'DELETE FROM t'", "delete"), ("EXECUTE IMMEDIATE 'DELETE ' 'FROM t'", "delete"),
    ("EXECUTE IMMEDIATE \"DROP TABLE t\"", "drop"), ("PREPARE s FROM 'DELETE FROM t'; EXECUTE s", "delete"),
    ("DO GET_LOCK('x', 10)", "get lock"), ("SELECT GET_LOCK('x', 10)", "get lock"),
    ("SELECT 1 FROM dual WHERE get_lock('y', 0)", "get lock"), ("DO RELEASE_LOCK('x')", "release lock"),
    ("SELECT RELEASE_ALL_LOCKS()", "release lock"), ("SELECT NEXTVAL(s)", "nextval"),
    ("SELECT NEXT VALUE FOR s", "nextval"), ("DO SETVAL(s, 1)", "setval"), ("SELECT sys_exec('id')", "sys_exec"),
    ("LOAD DATA INFILE '/tmp/x' INTO TABLE t", "load data"),
    ("LOAD DATA LOCAL INFILE '/tmp/x' REPLACE INTO TABLE t", "load data"),
    ("LOAD XML INFILE '/tmp/x' INTO TABLE t", "load data"),
    ("SELECT * FROM t INTO OUTFILE '/tmp/o'", "select into outfile"),
    ("SELECT 1 INTO DUMPFILE '/tmp/o'", "select into outfile"),
    ("SELECT * INTO OUTFILE '/tmp/o' FROM t", "select into outfile"),
])
def test_statements_that_write_are_writes(sql, verb):
    assert (verb, True) in verbs(sql), verbs(sql)


@pytest.mark.parametrize("sql", ["EXECUTE IMMEDIATE CONCAT('DELETE', ' FROM t')", "EXECUTE IMMEDIATE @q",
                                 "PREPARE s FROM @q; EXECUTE s", "EXECUTE s", "SELECT d.f()", "DO `d`.`f`(1)",
                                 "CALL p()", "LOAD DATA INFILE"])
def test_code_the_guard_cannot_read_is_opaque(sql):
    assert any(m == UNKNOWN for _, m in verbs(sql)), verbs(sql)


@pytest.mark.parametrize("sql", ["HANDLER t OPEN; HANDLER t READ FIRST; HANDLER t CLOSE", "DO 1", "DO SLEEP(0)",
                                 "PREPARE s FROM 'SELECT 1'; EXECUTE s; DEALLOCATE PREPARE s",
                                 "EXECUTE IMMEDIATE 'SELECT 1'", "SELECT LASTVAL(s)", "SELECT IS_FREE_LOCK('x')"])
def test_reads_stay_reads(sql):
    assert read_only(sql), verbs(sql)


def test_a_lock_function_held_through_a_sleep_is_held():
    (lock, sleep) = [a for a in normalise("mysql -e \"SELECT GET_LOCK('x', 0); DO SLEEP(60)\"")]
    assert lock.details.get("held_s") == 60.0 and lock.mutating is True


@pytest.mark.parametrize("sql,number", [("SELECT COUNT(*) FROM t", True), ("SELECT count(*) AS n FROM t", True),
                                        ("SELECT COUNT(*) FROM t $$; DELETE FROM t; $$", False),
                                        ("SELECT count(*) FROM t; system ls", False),
                                        ("SELECT count(*) FROM t /*!99999 ; SELECT 'x' */", False),
                                        ("SELECT count(*) FROM t\\G SELECT user()", False)])
def test_a_count_prints_a_number_only_when_every_reading_is_one_count(sql, number):
    from guardrail.actions.classifiers.mysql import Mysql
    from guardrail.actions.invocation import Invocation
    from guardrail.actions.words import Word

    inv = Invocation(argv=[Word.of(w) for w in ("mysql", "-N", "-e", sql)])
    assert Mysql().prints_number(inv) is number


# -- source FILE: read at decision time ----------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["source {f}", "\\. {f}", "SELECT 1; \\. {f}", "SOURCE {f}", "SELECT 1;\nsource {f}"])
def test_a_sourced_file_is_read_now_and_judged_as_the_client_reads_it(tmp_path, form):
    writes = tmp_path / "w.sql"
    writes.write_text("SELECT 1;\nDELETE FROM t;\n")
    reads = tmp_path / "r.sql"
    reads.write_text("SELECT v FROM t;\nSHOW PROCESSLIST;\n")
    assert ("delete", True) in verbs(form.format(f=writes))
    assert read_only(form.format(f=reads)), verbs(form.format(f=reads))  # the negative control


def test_a_sourced_file_is_read_in_every_reading_and_through_nested_sources(tmp_path):
    # A backslash in the file: under NO_BACKSLASH_ESCAPES (the server's, unseen) the string ends early.
    (tmp_path / "bs.sql").write_text("SELECT 'a\\';\nDELETE FROM t; -- '\n")
    assert ("delete", True) in verbs(f"source {tmp_path / 'bs.sql'}")
    (tmp_path / "inner.sql").write_text("DROP TABLE t;\n")
    (tmp_path / "outer.sql").write_text(f"SELECT 1;\nsource {tmp_path / 'inner.sql'}\n")
    assert ("drop", True) in verbs(f"source {tmp_path / 'outer.sql'}")
    # The delimiter a file sets holds after it, as the client's does.
    (tmp_path / "delim.sql").write_text("DELIMITER //\n")
    assert ("delete", True) in verbs(f"source {tmp_path / 'delim.sql'}\nSELECT 1// DELETE FROM t//")


def test_a_file_that_cannot_be_read_now_leaves_source_opaque(tmp_path):
    (tmp_path / "loop.sql").write_text(f"source {tmp_path / 'loop.sql'}\n")
    big = tmp_path / "big.sql"
    big.write_text("SELECT 1;\n" * 120_000)  # over 1 MiB
    fifo = tmp_path / "fifo.sql"
    os.mkfifo(fifo)
    latin = tmp_path / "latin.sql"
    latin.write_bytes(b"SELECT '\xe9';\n")
    for path in (tmp_path / "missing.sql", tmp_path / "loop.sql", big, fifo, "/dev/zero", tmp_path, latin):
        assert ("source", UNKNOWN) in verbs(f"source {path}"), path
