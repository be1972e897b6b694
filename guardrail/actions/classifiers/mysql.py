"""mysql / mariadb and their statements: `mariadb.<var>` by layer (GLOBAL runtime, SESSION session), grants.

Registered for `mysql` and `mariadb`; called by `Normaliser.dispatch`. SQL comes from `-e`, stdin (heredoc,
here-string, an echo piped in, `< file` read at decision time) or is not visible (another program's output,
`source`, an interactive session: mutating unknown). The text is read as the client and the server read it
(`mysqllex.readings`), every reading judged.
SET GLOBAL lands in the runtime layer (lost on restart; my.cnf is the declared one); SET PERSIST is declared.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from guardrail.actions.classifiers.base import OptionSpec, register
from guardrail.actions.classifiers.mysqllex import ClientCommand, Opaque, literal_text, readings
from guardrail.actions.classifiers.postgres import grant_effect, to_action
from guardrail.actions.classifiers.sql import (SqlEffect, Statement, Tok, common_effect, counts_only, hold_locks,
                                             literal, statements)
from guardrail.actions.invocation import Invocation, Unreadable, stdin_at_decision
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer

__all__ = ["Mysql", "MysqlAdmin", "mysql_effect"]

_SPEC = OptionSpec.of(
    ["-e", "--execute", "-h", "--host", "-P", "--port", "-u", "--user", "-D", "--database", "-S", "--socket",
     "--defaults-file", "--defaults-extra-file", "--default-character-set", "--init-command", "--protocol",
     "--ssl-ca", "--ssl-cert", "--ssl-key", "--connect-timeout", "--max-allowed-packet", "--login-path",
     "--tee", "--pager", "--delimiter"],
    {"--execute": "-e", "--host": "-h", "--port": "-P", "--user": "-u", "--database": "-D", "--socket": "-S"})

# mysql's flags that leave a count's output a number: no column names, batch, silent, no rehash.
_COUNT_FLAGS = frozenset({"-N", "--skip-column-names", "-s", "--silent", "-B", "--batch", "-A", "--no-auto-rehash",
                          "-r", "--raw", "-q", "--quick"})

_SCOPES = {"GLOBAL": ("set global", Layer.RUNTIME), "SESSION": ("set session", Layer.SESSION),
           "LOCAL": ("set session", Layer.SESSION), "PERSIST": ("set persist", Layer.DECLARED),
           "PERSIST_ONLY": ("set persist", Layer.DECLARED)}


def _set(st: Statement) -> list[SqlEffect]:
    """`SET [GLOBAL|SESSION] a = 1, @@global.b = 2, @u = 3` -> one effect per scope."""
    toks = st.toks[1:]
    if toks and toks[0].up in ("NAMES", "CHARACTER", "CHARSET"):
        return [SqlEffect(verb="set session", mutating=True, layer=Layer.SESSION,
                          keys=[KeyChange(key="mariadb.character_set", value=literal(toks[-1]))],
                          details={"sql_kind": "set"})]
    if toks and toks[0].up == "PASSWORD":
        return [SqlEffect(verb="set password", mutating=True, layer=Layer.DECLARED,
                          keys=[KeyChange(key="mariadb.password", value="<redacted>")],
                          details={"sql_kind": "password"})]
    groups: list[list[Any]] = [[]]
    depth = 0
    for t in toks:
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        if t.text == "," and depth == 0:
            groups.append([])
        else:
            groups[-1].append(t)
    scope = "SESSION"
    by_scope: dict[str, list[KeyChange]] = {}
    for g in groups:
        if not g:
            continue
        if g[0].up in _SCOPES:
            scope = g[0].up
            g = g[1:]
        if g and g[0].up == "TRANSACTION":
            by_scope.setdefault(scope, []).append(
                KeyChange(key="mariadb.transaction", value=" ".join(t.value for t in g[1:])))
            continue
        name, this_scope, k = _var_name(g)
        if this_scope:
            scope = this_scope
        if not name:
            continue
        value = None
        if k < len(g) and g[k].text in ("=", ":="):
            rest = g[k + 1:]
            value = literal(rest[0]) if len(rest) == 1 else " ".join(t.text for t in rest)
        by_scope.setdefault(scope, []).append(KeyChange(key=f"mariadb.{name}", value=value))
    out = []
    for sc, keys in by_scope.items():
        verb, layer = _SCOPES.get(sc, ("set session", Layer.SESSION))
        if all(k.key.startswith("mariadb.@") and not k.key.startswith("mariadb.@@") for k in keys):
            verb, layer = "set variable", Layer.SESSION
        out.append(SqlEffect(verb=verb, mutating=True, layer=layer, keys=keys,
                             details={"sql_kind": "set", "scope": sc.lower()}))
    return out or [SqlEffect(verb="set", mutating=UNKNOWN, opaque_reason="a SET the guard could not read")]


def _var_name(g: list[Any]) -> tuple[str, str | None, int]:
    """(variable name, scope from @@global./@@session., index after the name)."""
    if not g:
        return "", None, 0
    t = g[0]
    k = 1
    text = t.value
    scope = None
    if text.startswith("@@"):
        low = text[2:].lower()
        if low in ("global", "session", "local", "persist", "persist_only") and k < len(g) and g[k].text == ".":
            scope = low.upper()
            text = g[k + 1].value if k + 1 < len(g) else ""
            k += 2
        else:
            text = text[2:]
    elif text.startswith("@"):
        return text.lower(), "SESSION", k
    while k + 1 < len(g) and g[k].text == "." and g[k + 1].kind == "word":
        text = f"{text}.{g[k + 1].value}"
        k += 2
    return text.lower(), scope, k


def mysql_effect(st: Statement, prepared: set[str] | None = None, depth: int = 0) -> list[SqlEffect]:
    """What one MySQL/MariaDB statement does (a SET with several scopes gives several effects). `prepared` holds
    the names of statements PREPAREd from text the guard judged (their EXECUTE adds nothing)."""
    prepared = set() if prepared is None else prepared
    k = st.kw(0)
    if k == "SET" and st.kw(1) == "STATEMENT":
        # SET STATEMENT var = value [, ...] FOR stmt: the variables last one statement; the statement is what runs.
        at = st.index("FOR")
        if at < 0 or at + 1 >= len(st.toks):
            return [_opaque("set statement", "SET STATEMENT without a statement the guard can read")]
        return mysql_effect(Statement(st.toks[at + 1:], _after(st.text, st.toks[:at + 1])), prepared, depth)
    if k == "SET":
        return _set(st)
    if k in ("GRANT", "REVOKE"):
        return [grant_effect(st, "mariadb")]
    if k == "FLUSH":
        what = " ".join(t.value.upper() for t in st.toks[1:])
        return [SqlEffect(verb="flush", mutating=True, layer=Layer.NONE,
                          details={"sql_kind": "flush", "what": what,
                                   **({"lock": True} if "READ LOCK" in what else {})})]
    if k == "KILL":
        target = st.toks[-1].value if len(st.toks) > 1 else ""
        return [SqlEffect(verb="kill", mutating=True, layer=Layer.NONE,
                          details={"sql_kind": "kill", "id": target,
                                   "query_only": st.kw(1) == "QUERY", **_kill_user(st)})]
    if k == "SHUTDOWN":
        return [SqlEffect(verb="shutdown", mutating=True, layer=Layer.NONE,
                          details={"sql_kind": "server", "restart": True})]
    if k == "CREATE" and st.kw(1) == "OR" and st.kw(2) == "REPLACE" and st.kw(3) in ("USER", "DATABASE", "SCHEMA"):
        return [_create_or_replace(st)]
    if k in ("ALTER", "CREATE", "DROP", "RENAME") and st.kw(1) in ("USER", "ROLE"):
        return [_user(st)]
    if k in ("RESET", "CHANGE", "START", "STOP", "PURGE") and st.kw(1) in (
            "MASTER", "SLAVE", "REPLICA", "BINARY", "QUERY", "PERSIST", "REPLICATION"):
        details: dict[str, Any] = {"sql_kind": "server"}
        discards = _discards_logs(st)
        if discards:
            details["discards_logs"] = discards
        return [SqlEffect(verb=f"{k} {st.kw(1)}".lower(), mutating=True, layer=Layer.NONE, details=details)]
    if k in ("INSTALL", "UNINSTALL"):
        return [SqlEffect(verb=k.lower(), mutating=True, layer=Layer.DECLARED, details={"sql_kind": "server"})]
    if k in ("PREPARE", "EXECUTE", "DEALLOCATE") or k == "DROP" and st.kw(1) == "PREPARE":
        return _dynamic(st, prepared, depth)
    if k == "HANDLER" and st.kw(2) in ("OPEN", "READ", "CLOSE"):
        # HANDLER t OPEN | READ ... | CLOSE: a cursor over a table's rows, read only.
        return [SqlEffect(verb=f"handler {st.kw(2).lower()}", mutating=False,
                          details={"sql_kind": "read", "tables": [st.toks[1].value]})]
    if k == "LOAD":
        return [_load(st)]
    if k in ("CALL", "HANDLER", "SOURCE"):
        return [_opaque(k.lower(), f"{k} runs code or data whose effect is not visible")]
    if k == "CHECK" or k == "CHECKSUM":
        return [SqlEffect(verb=k.lower(), mutating=False, details={"sql_kind": "read"})]
    if k == "DO":
        # DO expr, ...: evaluates the expressions as a SELECT would, without a result.
        st = Statement([Tok("word", "SELECT", "SELECT"), *st.toks[1:]], st.text)
    eff = common_effect(st)
    if eff is not None:
        if k == "DO" and eff.verb == "select":
            eff.verb = "do"
        return [_functions(st, eff)]
    return [SqlEffect(verb=(k or "statement").lower(), mutating=UNKNOWN,
                      opaque_reason=f"SQL statement {k or st.text[:20]!r} is not one the guard knows")]


def _opaque(verb: str, reason: str) -> SqlEffect:
    return SqlEffect(verb=verb, mutating=UNKNOWN, details={"sql_kind": "procedural"}, opaque_reason=reason)


_MAX_DYNAMIC_DEPTH = 3


def _dynamic(st: Statement, prepared: set[str], depth: int) -> list[SqlEffect]:
    """SQL run from a string: EXECUTE IMMEDIATE 'text', PREPARE s FROM 'text' (judged as if it ran: an EXECUTE
    s may follow), EXECUTE s of a statement so prepared (nothing more). From a variable or an expression, or an
    EXECUTE of a statement the guard did not see prepared: opaque."""
    k = st.kw(0)
    if k in ("DEALLOCATE", "DROP"):
        return [SqlEffect(verb="deallocate prepare", mutating=False, skip=True)]
    if k == "EXECUTE" and st.kw(1) != "IMMEDIATE":
        name = st.toks[1].value.lower() if len(st.toks) > 1 else ""
        if name in prepared:
            return [SqlEffect(verb="execute", mutating=False, skip=True)]
        return [_opaque("execute", f"EXECUTE {name or '?'} runs a prepared statement the guard did not see "
                                   "prepared from a literal")]
    if k == "PREPARE":
        name = st.toks[1].value.lower() if len(st.toks) > 1 else ""
        text = literal_text(st.toks[3:]) if st.kw(2) == "FROM" else None
    else:
        using = st.index("USING")
        text = literal_text(st.toks[2:using if using > 0 else len(st.toks)])
        name = ""
    if text is None or depth >= _MAX_DYNAMIC_DEPTH:
        return [_opaque(k.lower(), f"{k} runs SQL from a variable or expression the guard cannot read; run the "
                                   "statement itself")]
    out: list[SqlEffect] = []
    for steps in readings([(text, False)]):
        for step in steps:
            if isinstance(step, Statement):
                out += mysql_effect(step, prepared, depth + 1)
            else:
                out.append(_opaque(k.lower(), getattr(step, "reason", f"{k} text the guard cannot read")))
    if name:
        prepared.add(name)
    for eff in out:
        eff.details["dynamic"] = k.lower()
    return out or [SqlEffect(verb=k.lower(), mutating=False, skip=True)]


def _load(st: Statement) -> SqlEffect:
    """LOAD DATA|XML [LOCAL] INFILE 'f' ... INTO TABLE t: rows written into t; LOAD INDEX INTO CACHE: a cache."""
    if st.kw(1) == "INDEX":
        return SqlEffect(verb="load index", mutating=True, layer=Layer.NONE, details={"sql_kind": "maintenance"})
    into = st.index("INTO")
    if into < 0 or st.index("INFILE") < 0:
        return _opaque("load", "a LOAD statement the guard cannot read")
    table = st.name_at(into + 1 + (st.kw(into + 1) == "TABLE"))[0]
    return SqlEffect(verb="load data", mutating=True, layer=Layer.DECLARED,
                     details={"sql_kind": "dml", "table": table, "local": st.index("LOCAL") > 0},
                     target_kind="table", target_name=table)


# MariaDB/MySQL functions that change server state when a SELECT or DO evaluates them: user-level locks other
# sessions wait on, sequences, and the common command-running UDFs.
_STATE_FUNCS = {"get_lock": "get lock", "release_lock": "release lock", "release_all_locks": "release lock",
                "nextval": "nextval", "setval": "setval", "sys_exec": "sys_exec", "sys_eval": "sys_eval"}


def _functions(st: Statement, eff: SqlEffect) -> SqlEffect:
    """A read that calls a function with an effect is that effect: GET_LOCK and its releases, a sequence's
    NEXTVAL / SETVAL / NEXT VALUE FOR, a command UDF; a schema-qualified call (`db.f()`) is a stored function,
    which may write: opaque. LOAD_FILE reads a file of the server's."""
    if eff.mutating is not False:
        return eff
    for i, t in enumerate(st.toks[:-1]):
        name = t.value.lower()
        if t.kind not in ("word", "qid") or st.toks[i + 1].text != "(":
            if t.up == "NEXT" and st.kw(i + 1) == "VALUE" and st.kw(i + 2) == "FOR":
                return SqlEffect(verb="nextval", mutating=True, layer=Layer.DECLARED,
                                 details={**eff.details, "sql_kind": "function"})
            continue
        if i > 0 and st.toks[i - 1].text == "." and i > 1 and st.toks[i - 2].kind in ("word", "qid"):
            return SqlEffect(verb="call", mutating=UNKNOWN, details={**eff.details, "sql_kind": "procedural"},
                             opaque_reason=f"{st.toks[i - 2].value}.{t.value}() is a stored function, which may "
                                           "write; its body is not judged here")
        if name in _STATE_FUNCS:
            lock = name == "get_lock"
            return SqlEffect(verb=_STATE_FUNCS[name], mutating=True,
                             layer=Layer.DECLARED if name in ("nextval", "setval") else Layer.NONE,
                             details={**eff.details, "sql_kind": "lock" if "lock" in name else "function",
                                      **({"lock": True} if lock else {})})
        if name == "load_file":
            eff.details["reads_server_files"] = True
    return eff


# What a PURGE ... BEFORE may name as "now": it then keeps no binary log but the one being written.
_NOW = {"NOW", "CURRENT_TIMESTAMP", "SYSDATE", "UTC_TIMESTAMP", "LOCALTIME", "LOCALTIMESTAMP", "CURDATE",
        "CURRENT_DATE", "UTC_DATE"}


def _discards_logs(st: Statement) -> str | None:
    """What a statement throws away of the binary log that replicas and point-in-time recovery read: RESET MASTER
    (MySQL 8.4: RESET BINARY LOGS AND GTIDS) deletes every binary log; PURGE BINARY|MASTER LOGS TO a file every one
    before it (a name past the last: all of them), BEFORE any time not clearly past every one but the current. Only
    BEFORE `now() - INTERVAL n unit` (DATE_SUB(now(), ...)) or a date more than a day ago keeps the recent ones
    (routine retention). On a replica, RESET SLAVE|REPLICA and CHANGE MASTER|REPLICATION SOURCE TO discard its relay
    logs and its place in the primary's log."""
    k, k1 = st.kw(0), st.kw(1)
    if k == "RESET" and (k1 == "MASTER" or k1 == "BINARY" and st.kw(2) == "LOGS"):
        return "every binary log"
    if k == "RESET" and k1 in ("SLAVE", "REPLICA") or k == "CHANGE" and (
            k1 == "MASTER" or k1 == "REPLICATION" and st.kw(2) == "SOURCE"):
        return "the replica's relay logs and its place in the primary's binary log"
    if k != "PURGE" or k1 not in ("BINARY", "MASTER") or st.kw(2) != "LOGS":
        return None
    if st.kw(3) == "TO":
        return "every binary log before the one named (all of them, for a name past the last)"
    if st.kw(3) != "BEFORE":
        return None
    rest = st.toks[4:]
    if len(rest) == 1 and rest[0].kind == "str":
        try:
            when = datetime.fromisoformat(rest[0].value.strip().replace(" ", "T"))
        except ValueError:
            return "every binary log before a time the guard cannot read"
        if when.replace(tzinfo=None) >= datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=1):
            return "every binary log but the current one"
        return None
    return None if _past(rest) else "every binary log but the current one"


_INTERVAL_S = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 604800, "MONTH": 2592000,
               "QUARTER": 7776000, "YEAR": 31536000}


def _past(expr: list[Any]) -> bool:
    """`now() - INTERVAL n unit` or `DATE_SUB(now(), INTERVAL n unit)` (SUBDATE) at least a day back, as a literal
    date must be: a time before which only old logs lie."""
    words = [t.up or t.text for t in expr if t.text not in ("(", ")")]
    if words[:1] in (["DATE_SUB"], ["SUBDATE"]) and len(words) >= 2 and words[1] in _NOW:
        words = [words[1], "-", *[w for w in words[2:] if w != ","]]
    if len(words) != 5 or words[0] not in _NOW or words[1] != "-" or words[2] != "INTERVAL" \
            or words[4] not in _INTERVAL_S:
        return False
    try:
        return float(words[3].strip("'")) * _INTERVAL_S[words[4]] >= 86400
    except ValueError:
        return False


def _user(st: Statement) -> SqlEffect:
    verb = f"{st.kw(0)} {st.kw(1)}".lower()
    j = 2
    if st.kw(j) == "IF":
        j += 3 if st.kw(j + 1) == "NOT" else 2
    user_toks = []
    while j < len(st.toks) and st.toks[j].up not in ("IDENTIFIED", "WITH", "REQUIRE", "PASSWORD", "ACCOUNT",
                                                     "DEFAULT", "TO", ","):
        user_toks.append(st.toks[j])
        j += 1
    user = "".join(t.value if t.kind != "str" else f"'{t.value}'" for t in user_toks)
    keys = []
    for i, t in enumerate(st.toks):
        if t.up in ("MAX_USER_CONNECTIONS", "MAX_CONNECTIONS_PER_HOUR", "MAX_QUERIES_PER_HOUR",
                    "MAX_UPDATES_PER_HOUR", "MAX_STATEMENT_TIME") and i + 1 < len(st.toks):
            keys.append(KeyChange(key=f"mariadb.user.{t.value.lower()}", value=literal(st.toks[i + 1]),
                                  scope={"user": user}))
        if t.up == "IDENTIFIED":
            keys.append(KeyChange(key="mariadb.user.password", value="<redacted>", scope={"user": user}))
    return SqlEffect(verb=verb, mutating=True, layer=Layer.DECLARED, keys=keys,
                     details={"sql_kind": "user", "user": user, **({"drop": True} if st.kw(0) == "DROP" else {}),
                              **_login_refused(st)},
                     target_kind="user", target_name=user)


def _login_refused(st: Statement) -> dict[str, Any]:
    """ALTER USER clauses after which the account's clients are refused: its password expired now (PASSWORD EXPIRE,
    or EXPIRE INTERVAL 1 DAY), a TLS certificate required (REQUIRE SSL, X509, SUBJECT, ISSUER, CIPHER; not NONE), or a
    per-hour limit small enough to be reached at once (MAX_QUERIES_PER_HOUR 1 ...; 0 means no limit)."""
    if st.kw(0) != "ALTER":
        return {}
    out: dict[str, Any] = {}
    for i, t in enumerate(st.toks):
        if t.up == "EXPIRE" and st.kw(i - 1) == "PASSWORD":
            if st.kw(i + 1) not in ("NEVER", "DEFAULT", "INTERVAL") or st.kw(i + 1) == "INTERVAL" and (
                    literal(st.toks[i + 2]) if i + 2 < len(st.toks) else 0) in (0, 1):
                out["login_refused"] = "PASSWORD EXPIRE"
        elif t.up == "REQUIRE" and st.kw(i + 1) not in ("NONE", ""):
            out["login_refused"] = f"REQUIRE {st.kw(i + 1)}"
        elif t.up in ("MAX_QUERIES_PER_HOUR", "MAX_CONNECTIONS_PER_HOUR", "MAX_UPDATES_PER_HOUR") \
                and i + 1 < len(st.toks) and isinstance(literal(st.toks[i + 1]), int) \
                and 0 < literal(st.toks[i + 1]) <= 100:
            out["login_refused"] = f"{t.up} {st.toks[i + 1].text}"
        elif t.up == "MAX_USER_CONNECTIONS" and i + 1 < len(st.toks) and literal(st.toks[i + 1]) == 1:
            out["login_refused"] = "MAX_USER_CONNECTIONS 1"
    return out


def _create_or_replace(st: Statement) -> SqlEffect:
    """MariaDB's CREATE OR REPLACE USER|DATABASE: DROP first, then CREATE. A database is dropped with every table in
    it; a user is recreated without its grants (and with no password unless one is given), so its clients are
    refused."""
    obj = st.kw(3)
    j = 4 + (3 if st.kw(4) == "IF" else 0)
    name = st.name_at(j)[0]
    if obj in ("DATABASE", "SCHEMA"):
        return SqlEffect(verb="drop", mutating=True, layer=Layer.DECLARED,
                         details={"sql_kind": "drop", "object": obj.lower(), "name": name, "replace": True},
                         target_kind=obj.lower(), target_name=name)
    eff = _user(Statement([st.toks[0], *st.toks[3:]], st.text))
    eff.details["login_refused"] = "CREATE OR REPLACE USER (recreated without its grants)"
    return eff


def _kill_user(st: Statement) -> dict[str, Any]:
    """KILL [HARD|SOFT] [CONNECTION|QUERY] USER name: every connection (or running statement) of that account."""
    at = st.index("USER")
    return {"broad": True, "user": st.name_at(at + 1)[0]} if 0 < at <= 4 else {}


# The client's own commands that run a shell command, read a file as SQL, write a file, connect elsewhere or change
# the character set later text is read in; the others (use, go, print, status, warnings, ...) change nothing.
_CLIENT_EFFECTS = {"system": "runs a shell command", "source": "runs the SQL of a file the guard does not read",
                   "pager": "pipes output through a shell command", "tee": "writes a file",
                   "edit": "runs an editor", "connect": "reconnects, perhaps to another server",
                   "charset": "changes the character set later text is read in"}
# Options that make the client run SQL, a command or a library not on the command line.
_RUNS_UNSEEN = frozenset({"--defaults-file", "--defaults-extra-file", "--plugin-dir", "--default-auth", "--pager"})
# Client character sets in which no multi-byte character ends in a backslash or backtick byte.
_SAFE_CHARSETS = frozenset({"utf8", "utf8mb4", "utf8mb3", "latin1", "ascii", "binary", "auto"})


# Statements that open a compound block (MariaDB runs `BEGIN NOT ATOMIC ... END`, IF, CASE, LOOP, WHILE, REPEAT and
# FOR outside stored programs too), the keyword ending each one's head, and those that only close or steer one.
_OPENS = {"IF": "THEN", "ELSEIF": "THEN", "WHILE": "DO", "FOR": "DO", "CASE": "THEN", "WHEN": "THEN"}
_BARE_OPENS = {"LOOP", "REPEAT", "ELSE"}
_STEERS = {"END", "LEAVE", "ITERATE", "UNTIL"}


def compound_bodies(stmts: list[Statement]) -> list[Statement]:
    """The statements a compound statement runs, each judged as it would be on its own: `BEGIN NOT ATOMIC DROP
    DATABASE d; END` splits at `;` into `BEGIN NOT ATOMIC DROP DATABASE d` and `END`, which read as a transaction;
    here the first is `DROP DATABASE d`. Block heads (a label, BEGIN [NOT ATOMIC], IF c THEN, WHILE c DO, LOOP,
    REPEAT, CASE x WHEN c THEN, ELSE) are taken off the front; END ..., LEAVE, ITERATE, UNTIL and local DECLAREs
    run nothing of their own. A handler (`DECLARE ... HANDLER FOR ... stmt`) is opaque: its statement is not read."""
    out: list[Statement] = []
    depth = 0
    for st in stmts:
        toks, i = st.toks, 0
        while i < len(toks):
            up = toks[i].up
            if i + 1 < len(toks) and toks[i].kind in ("word", "qid") and toks[i + 1].text == ":":
                i += 2  # a label
            elif up == "BEGIN" and st.kw(i + 1) == "NOT" and st.kw(i + 2) == "ATOMIC":
                depth, i = depth + 1, i + 3
            elif up == "BEGIN" and depth > 0:
                depth, i = depth + 1, i + 1
            elif up in _OPENS:
                head = st.index(_OPENS[up], start=i + 1)
                if head < 0:
                    break
                depth += up in ("IF", "WHILE", "FOR", "CASE")
                i = head + 1
            elif up in _BARE_OPENS:
                depth += up != "ELSE"
                i += 1
            else:
                break
        rest = toks[i:]
        if rest and rest[0].up in _STEERS and depth > 0:
            depth -= rest[0].up in ("END", "UNTIL")
            continue
        if rest and rest[0].up == "DECLARE" and depth > 0:
            if st.index("HANDLER", start=i) < 0:
                continue  # a local variable, cursor or condition
            rest = rest[:1]  # opaque: the guard does not read a handler's statement
        if rest:
            out.append(st if i == 0 else Statement(rest, _after(st.text, toks[:i])))
    return out


def _after(text: str, head: list[Any]) -> str:
    """A statement's text past its first tokens (a block head taken off)."""
    pos = 0
    for t in head:
        at = text.find(t.text, pos)
        if at < 0:
            return text
        pos = at + len(t.text)
    return text[pos:].strip()



def _without_password(args):
    """The client's arguments without its password (`-pSECRET`, `--password=...`): -p's value is attached, so the
    option specs need not know it, and it is never read."""
    return [a for a in args if not (a.startswith("-p") and not a.startswith("--p") or a.startswith("--password"))]

def _one_count(sql: str) -> bool:
    """Is `sql`, however the client and server read it, one `SELECT count(...)` (see `counts_only`)?"""
    return all(len(steps) == 1 and isinstance(steps[0], Statement)
               and counts_only(steps[0].text, hash_comments=True, exec_comments=True)
               for steps in readings([(sql, True)]))


@register
class Mysql:
    """mysql and mariadb clients."""

    commands = ("mysql", "mariadb")

    def prints_number(self, inv: Invocation) -> bool:
        """`mysql -N -e "SELECT COUNT(*) FROM t"`: no column names, a count: a number. Only the connection options
        beside them (no -t/-H/-X format, no -v echo of the query, no --init-command)."""
        p = _SPEC.parse(_without_password(inv.args))
        sql = p.all("-e")
        return p.has("-N", "--skip-column-names") and p.flags <= _COUNT_FLAGS \
            and set(p.opts) <= {"-e", "-h", "-P", "-u", "-D"} and len(sql) == 1 and not sql[0].dynamic \
            and len(p.positionals) <= 1 and not inv.args_pending and _one_count(str(sql[0]))

    def classify(self, inv: Invocation) -> list[Action]:
        args = [a for a in inv.args]
        p = _SPEC.parse(_without_password(args))
        host = p.get("-h")
        db = p.get("-D") or (p.positionals[0] if p.positionals else None)
        target = inv.service_target(str(host) if host is not None else None, "mariadb")
        base = {"database": str(db) if db is not None else None, "user": str(p.get("-u")) if p.get("-u") else None}
        execs = p.all("-e")
        hidden = next((a for a in args if a.split("=", 1)[0] in _RUNS_UNSEEN), None)
        if hidden is not None:
            return [inv.action("mysql", "options", target=target, mutating=UNKNOWN, details=base,
                               opaque_reason=f"{hidden.split('=', 1)[0]}: an options file can set init-command (SQL "
                                             "run on connecting), plugin-dir and default-auth (a library the client "
                                             "loads), and a pager is a shell command; pass the options themselves")]
        if any(getattr(e, "has_substitution", False) for e in execs):
            return [inv.action("mysql", "query", target=target, mutating=UNKNOWN,
                               opaque_reason="the SQL is computed at run time ($(...)); run the plain SQL instead",
                               details=base)]
        # --init-command is SQL the client runs on connecting, before anything else.
        inits = [str(e) for e in p.all("--init-command")]
        # Several -e are one text to the client, joined by a space (a string or comment may run across them).
        execs_text = [str(e) for e in execs]
        sources = [" ".join(execs_text)] if execs else []
        if not sources:
            st = inv.stdin
            if st is None:
                return [inv.action("mysql", "session", target=target, mutating=UNKNOWN,
                                   opaque_reason="an interactive mysql session: the SQL typed into it is not visible",
                                   details=base)]
            try:  # a heredoc, a here-string, an echo piped in, or `< file.sql` read now (as kubectl -f reads)
                sources = [stdin_at_decision(st, inv.where)]
            except Unreadable as e:
                return [inv.action("mysql", "query", target=target, mutating=UNKNOWN,
                                   opaque_reason=f"the SQL comes from {st.producer or st.source} and is not visible "
                                                 f"({e}); run it with -e, from a heredoc, or from a readable file "
                                                 "of at most 1 MB",
                                   details=base)]
        out: list[Action] = []
        delimiter = str(p.get("--delimiter") or ";")
        charset = str(p.get("--default-character-set") or "auto").lower()
        if charset not in _SAFE_CHARSETS and any(ord(c) > 127 for src in inits + sources for c in src):
            return [inv.action("mysql", "query", target=target, mutating=UNKNOWN, details=base,
                               opaque_reason=f"non-ASCII text in character set {charset}: a multi-byte character "
                                             "can swallow the backslash or quote after it")]
        # Each way the server could read the text (its sql_mode, its version for /*!NNNNN comments): every action
        # of the first reading, and those of the others it lacks. Several -e are also judged one by one.
        seen: set[str] = set()
        variants = [sources, *([[e] for e in execs_text] if len(execs_text) > 1 else [])]
        for texts in variants:
            for steps in readings([*((i, False) for i in inits), *((src, True) for src in texts)],
                                  delimiter=delimiter, preserve_comments=p.has("-c", "--comments")):
                fresh = [(a, a.model_dump_json()) for a in self._judge(inv, steps, target, base)]
                out += [a for a, key in fresh if key not in seen]
                seen |= {key for _, key in fresh}
        if not out:
            out.append(inv.action("mysql", "connect", target=target, mutating=False, details=base))
        return out

    def _judge(self, inv: Invocation, steps: list[Any], target: Any, base: dict[str, Any]) -> list[Action]:
        """One reading's statements and client commands as actions."""
        out: list[Action] = []
        judged: list[tuple[Statement, SqlEffect]] = []
        prepared: set[str] = set()
        sts = [s for s in steps if isinstance(s, Statement)]
        for st_ in compound_bodies(sts):
            judged += [(st_, eff) for eff in mysql_effect(st_, prepared)]
        dbs, only_db = _default_databases(steps, base.get("database"))
        for st_, eff in judged:
            if eff.details.get("on") == "*":
                # `ON *` is the default database's `db.*`; with none selected the server grants at the global level.
                db = dbs.get(id(st_), only_db)
                eff.details["on"] = eff.target_name = f"{db}.*" if db else "*.*"
        hold_locks([eff for _, eff in judged])
        out += [to_action(inv, "mysql", eff, st_.text, target, base) for st_, eff in judged if not eff.skip]
        for step in steps:
            if isinstance(step, ClientCommand) and step.name in _CLIENT_EFFECTS:
                out.append(inv.action("mysql", step.name, target=target, mutating=UNKNOWN,
                                      details={**base, "statement": step.text},
                                      opaque_reason=f"mysql client command {step.name} "
                                                    f"{_CLIENT_EFFECTS[step.name]}"))
            elif isinstance(step, Opaque):
                out.append(inv.action("mysql", "query", target=target, mutating=UNKNOWN, details=base,
                                      opaque_reason=step.reason))
        return out


def _default_databases(steps: list[Any], initial: str | None) -> tuple[dict[int, str | None], str | None]:
    """The default database each top-level statement runs in (by `id`): the client's `-D`/positional database until
    a `USE db` (or the client's `use`/`\\u`) selects another; and, for statements inside a compound statement, one
    database only if the whole text runs in one (else None: ON * then reads as the broadest grant, `*.*`, rather than
    guessing)."""
    current, seen, at = initial, {initial}, {}
    for step in steps:
        if isinstance(step, Statement):
            at[id(step)] = current
            if step.kw(0) == "USE" and len(step.toks) >= 2:
                current = str(step.toks[1].value)
                seen.add(current)
        elif isinstance(step, ClientCommand) and step.name == "use":
            words = step.text.split()
            current = words[-1].strip("`;") if len(words) > 1 else current
            seen.add(current)
    return at, (next(iter(seen)) if len(seen) == 1 else None)


_ADMIN_SPEC = OptionSpec.of(
    # -w/--wait takes its value only attached (`-w5`, `--wait=5`): `-w shutdown` is a flag and a command.
    [*_SPEC.takes_value, "-i", "--sleep", "-c", "--count"],
    {**_SPEC.aliases, "--sleep": "-i", "--count": "-c"})
# mysqladmin's commands as the SQL the server runs for them; None: only connects (ping, version).
_ADMIN_SQL: dict[str, str | None] = {
    "status": "SHOW STATUS", "extended-status": "SHOW GLOBAL STATUS", "variables": "SHOW GLOBAL VARIABLES",
    "processlist": "SHOW PROCESSLIST", "ping": None, "version": None, "shutdown": "SHUTDOWN",
    "flush-hosts": "FLUSH HOSTS", "flush-logs": "FLUSH LOGS", "flush-privileges": "FLUSH PRIVILEGES",
    "reload": "FLUSH PRIVILEGES", "flush-status": "FLUSH STATUS", "flush-tables": "FLUSH TABLES",
    "flush-threads": "FLUSH THREADS", "flush-table-statistics": "FLUSH TABLE_STATISTICS",
    "flush-user-statistics": "FLUSH USER_STATISTICS", "flush-index-statistics": "FLUSH INDEX_STATISTICS",
    "flush-client-statistics": "FLUSH CLIENT_STATISTICS", "flush-all-statistics": "FLUSH STATUS",
    "flush-binary-log": "FLUSH BINARY LOGS", "flush-engine-log": "FLUSH ENGINE LOGS",
    "flush-error-log": "FLUSH ERROR LOGS", "flush-general-log": "FLUSH GENERAL LOGS",
    "flush-relay-log": "FLUSH RELAY LOGS", "flush-slow-log": "FLUSH SLOW LOGS",
    "refresh": "FLUSH TABLES; FLUSH LOGS", "start-slave": "START SLAVE", "stop-slave": "STOP SLAVE",
    "start-all-slaves": "START ALL SLAVES", "stop-all-slaves": "STOP ALL SLAVES",
    "start-replica": "START REPLICA", "stop-replica": "STOP REPLICA",
}
# Commands that take a word: the statement is built from it.
_ADMIN_ARG_SQL = {"kill": "KILL {}", "create": "CREATE DATABASE {}", "drop": "DROP DATABASE {}"}


def _admin_command(word: str) -> str | None:
    """mysqladmin takes any unique prefix of a command (`proc` is processlist); the full name, or None."""
    names = [*_ADMIN_SQL, *_ADMIN_ARG_SQL]
    if word in names:
        return word
    hits = [n for n in names if n.startswith(word)]
    return hits[0] if len(hits) == 1 else None


@register
class MysqlAdmin:
    """mysqladmin: each command judged as the SQL statement it sends (`shutdown` is SHUTDOWN, `kill 7` KILL 7,
    `drop db` DROP DATABASE db); a command it cannot map (password, debug, a dynamic word) is opaque."""

    commands = ("mysqladmin", "mariadb-admin")

    def classify(self, inv: Invocation) -> list[Action]:
        p = _ADMIN_SPEC.parse(_without_password(inv.args))
        host = p.get("-h")
        target = inv.service_target(str(host) if host is not None else None, "mariadb")
        base = {"database": None, "user": str(p.get("-u")) if p.get("-u") else None}
        words, sql, i = p.positionals, [], 0
        while i < len(words):
            w = words[i]
            name = None if w.dynamic else _admin_command(str(w).lower())
            if name is None:
                return [inv.action("mysqladmin", str(w), target=target, mutating=UNKNOWN, details=base,
                                   opaque_reason=f"mysqladmin {w}: not a command the guard can map to SQL; run the "
                                                 "statement itself with mysql -e")]
            if name in _ADMIN_ARG_SQL:
                arg = words[i + 1] if i + 1 < len(words) else None
                if arg is None or arg.dynamic:
                    return [inv.action("mysqladmin", name, target=target, mutating=UNKNOWN, details=base,
                                       opaque_reason=f"mysqladmin {name} needs a plain argument")]
                parts = str(arg).split(",") if name == "kill" else [str(arg)]
                sql += [_ADMIN_ARG_SQL[name].format(x.strip()) for x in parts if x.strip()]
                i += 2
                continue
            if _ADMIN_SQL[name]:
                sql.append(_ADMIN_SQL[name])
            i += 1
        out = [to_action(inv, "mysql", eff, st.text, target, base)
               for steps in readings([("; ".join(sql), False)]) for st in steps if isinstance(st, Statement)
               for eff in mysql_effect(st) if not eff.skip]
        return out or [inv.action("mysqladmin", "connect", target=target, mutating=False, details=base)]
