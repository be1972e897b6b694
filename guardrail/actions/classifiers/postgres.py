"""psql and PostgreSQL statements: GUCs by scope (`postgres.<guc>` with {role, database}), grants, backends.

Registered for `psql`; called by `Normaliser.dispatch`. The SQL comes from `-c` (each one), stdin (a heredoc, a
here-string, `echo ... | psql`) or is not visible (`-f FILE`, `< file`, an interactive session: mutating unknown).
Layers: ALTER ROLE / ALTER DATABASE / ALTER SYSTEM write the declared layer; SET and set_config the session.
The SQL is split and read by PostgreSQL's own parser (`pgsql.py`): what it rejects is denied, and the readings
here (`pg_effect`) run on each statement's canonical text. psql's own layer is read as psql reads it: meta-commands
(a backslash outside what the server's lexer calls strings and comments), `:variables` in the SQL it reads from
stdin (-c text is sent as it is), and a setting that changes how the rest is lexed (then the rest is opaque).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from guardrail.actions.classifiers.base import OptionSpec, register
from guardrail.actions.classifiers.pgsql import lexing_value_known, psql_variables, read_sql
from guardrail.actions.classifiers.sql import (SqlEffect, Statement, common_effect, counts_only, cte_dml_effects,
                                              hold_locks, literal, pg_bool, scan, statements)
from guardrail.actions.invocation import Invocation, Unreadable, read_at_decision
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Target
from guardrail.clients.pgquery import SqlSyntaxError
from guardrail.clients.pgquery import token_spans

__all__ = ["Psql", "pg_effect", "console_effect", "CONSOLE_DATABASE"]

_SPEC = OptionSpec.of(
    ["-c", "--command", "-f", "--file", "-h", "--host", "-p", "--port", "-U", "--username", "-d", "--dbname",
     "-v", "--set", "--variable", "-o", "--output", "-L", "--log-file", "-F", "--field-separator", "-R",
     "--record-separator", "-P", "--pset", "-T", "--table-attr"],
    {"--command": "-c", "--file": "-f", "--host": "-h", "--port": "-p", "--username": "-U", "--dbname": "-d",
     "--set": "-v", "--variable": "-v", "--output": "-o"})

# psql's flags that leave a count's output a number: aligned or not, quiet, no psqlrc, no password prompt.
_COUNT_FLAGS = frozenset({"-A", "-t", "-q", "-X", "-w", "-W", "-n", "--no-align", "--tuples-only", "--quiet",
                          "--no-psqlrc", "--no-password", "--password", "--no-readline"})

_ROLE_ATTRS = {"SUPERUSER", "NOSUPERUSER", "CREATEDB", "NOCREATEDB", "CREATEROLE", "NOCREATEROLE", "INHERIT",
               "NOINHERIT", "LOGIN", "NOLOGIN", "REPLICATION", "NOREPLICATION", "BYPASSRLS", "NOBYPASSRLS"}


def _guc_assignment(st: Statement, at: int) -> tuple[str, Any] | None:
    """`name TO value` / `name = value` / `name FROM CURRENT` from index `at`."""
    name, j = st.name_at(at)
    if not name:
        return None
    if st.kw(j) == "FROM" and st.kw(j + 1) == "CURRENT":
        return name.lower(), "FROM CURRENT"
    if j < len(st.toks) and (st.toks[j].up == "TO" or st.toks[j].text == "="):
        vals = st.toks[j + 1:]
        if not vals:
            return name.lower(), None
        if len(vals) == 1:
            return name.lower(), pg_bool(name.lower(), literal(vals[0]))
        return name.lower(), " ".join(t.value for t in vals if t.text != ",") if all(
            t.kind != "op" or t.text == "," for t in vals) else " ".join(t.text for t in vals)
    return None


def _setting(st: Statement, at: int, verb: str, layer: Layer, scope: dict[str, str]) -> SqlEffect:
    """`SET name = v`, `RESET name`, `RESET ALL` from index `at` (the SET/RESET keyword)."""
    kw = st.kw(at)
    details: dict[str, Any] = {"sql_kind": verb, "scope": dict(scope)}
    if kw == "RESET":
        name, _ = st.name_at(at + 1)
        key = "postgres.*" if name.upper() == "ALL" else f"postgres.{name.lower()}"
        details["reset"] = True
        return SqlEffect(verb=verb, mutating=True, layer=layer, keys=[KeyChange(key=key, value=None, scope=scope)],
                         details=details)
    if kw == "SET":
        j = at + 1
        if st.kw(j) in ("SESSION", "LOCAL") and st.kw(j + 1) not in ("AUTHORIZATION", "CHARACTERISTICS"):
            details["local"] = st.kw(j) == "LOCAL"
            j += 1
        if st.kw(j) == "TIME" and st.kw(j + 1) == "ZONE":
            val = literal(st.toks[j + 2]) if j + 2 < len(st.toks) else None
            return SqlEffect(verb=verb, mutating=True, layer=layer,
                             keys=[KeyChange(key="postgres.timezone", value=val, scope=scope)], details=details)
        if st.kw(j) in ("ROLE", "SESSION", "TRANSACTION"):
            what = st.kw(j).lower()
            return SqlEffect(verb=verb, mutating=True, layer=Layer.SESSION,
                             keys=[KeyChange(key=f"postgres.{what}", value=" ".join(t.value for t in st.toks[j + 1:]),
                                             scope=scope)], details=details)
        got = _guc_assignment(st, j)
        if got is not None:
            return SqlEffect(verb=verb, mutating=True, layer=layer,
                             keys=[KeyChange(key=f"postgres.{got[0]}", value=got[1], scope=scope)], details=details)
    return SqlEffect(verb=verb, mutating=True, layer=layer, details=details,
                     opaque_reason="a setting change the guard could not read")


def _expires_soon(until: Any, *, now: datetime | None = None) -> bool:
    """Whether `VALID UNTIL <until>` ends the role's logins within a day: a time already past or close (`'2000-01-01'`,
    `'now'`, `'-infinity'`), or one that cannot be read. `'infinity'` and a later date are how an expired login is
    repaired."""
    text = str(until or "").strip().lower()
    if text in ("infinity", "+infinity"):
        return False
    now = now or datetime.now(timezone.utc)
    m = re.match(r"(\d{4}-\d{2}-\d{2})(?:[ t](\d{2}:\d{2}(?::\d{2})?))?", text)
    if m is None:
        return True  # 'now', 'today', 'epoch', '-infinity', or a form not read here: as an expiry
    try:
        when = datetime.fromisoformat(m.group(1) + (f"T{m.group(2)}" if m.group(2) else "")).replace(tzinfo=timezone.utc)
    except ValueError:
        return True
    return when <= now + timedelta(days=1)


def _alter_role(st: Statement) -> SqlEffect:
    j = 2
    role, j = st.name_at(j)
    if role.upper() in ("CURRENT_USER", "SESSION_USER", "CURRENT_ROLE"):
        role = role.lower()
    scope = {"role": role}
    if st.kw(j) == "IN" and st.kw(j + 1) == "DATABASE":
        db, j = st.name_at(j + 2)
        scope["database"] = db
    if st.kw(j) in ("SET", "RESET"):
        eff = _setting(st, j, "alter role", Layer.DECLARED, scope)
        eff.target_kind, eff.target_name = "role", role
        return eff
    keys: list[KeyChange] = []
    details: dict[str, Any] = {"sql_kind": "alter role", "role": role}
    k = j + (1 if st.kw(j) == "WITH" else 0)
    while k < len(st.toks):
        w = st.kw(k)
        if w in _ROLE_ATTRS:
            attr = (w[2:] if w.startswith("NO") else w).lower()
            keys.append(KeyChange(key=f"postgres.role.{attr}", value=not w.startswith("NO"), scope={"role": role}))
        elif w == "CONNECTION" and st.kw(k + 1) == "LIMIT" and k + 2 < len(st.toks):
            limit, used = _limit(st, k + 2)
            keys.append(KeyChange(key="postgres.role.connection_limit", value=limit, scope={"role": role}))
            k += 1 + used
        elif w in ("PASSWORD", "ENCRYPTED"):
            keys.append(KeyChange(key="postgres.role.password", value="<redacted>", scope={"role": role}))
            k += 1 if w == "PASSWORD" else 2
        elif w == "VALID" and st.kw(k + 1) == "UNTIL":
            until = literal(st.toks[k + 2]) if k + 2 < len(st.toks) else None
            keys.append(KeyChange(key="postgres.role.valid_until", value=until, scope={"role": role}))
            if _expires_soon(until):
                details["login_expires"] = str(until)
            k += 2
        elif w == "RENAME":
            keys.append(KeyChange(key="postgres.role.name", value=st.name_at(k + 2)[0], scope={"role": role}))
            break
        k += 1
    return SqlEffect(verb="alter role", mutating=True, layer=Layer.DECLARED, keys=keys, details=details,
                     target_kind="role", target_name=role)


def _limit(st: Statement, i: int) -> tuple[Any, int]:
    """A CONNECTION LIMIT value and how many tokens it takes: `-1` (no limit) is a minus and a number."""
    tok = st.toks[i]
    if tok.text == "-" and i + 1 < len(st.toks) and st.toks[i + 1].kind == "num":
        v = literal(st.toks[i + 1])
        return (-v if isinstance(v, (int, float)) else f"-{v}"), 2
    return literal(tok), 1


def _alter_database(st: Statement) -> SqlEffect:
    db, j = st.name_at(2)
    if st.kw(j) in ("SET", "RESET"):
        eff = _setting(st, j, "alter database", Layer.DECLARED, {"database": db})
        eff.target_kind, eff.target_name = "database", db
        return eff
    keys = []
    k = j + (1 if st.kw(j) == "WITH" else 0)
    if st.kw(k) == "CONNECTION" and st.kw(k + 1) == "LIMIT" and k + 2 < len(st.toks):
        keys.append(KeyChange(key="postgres.database.connection_limit", value=_limit(st, k + 2)[0],
                              scope={"database": db}))
    return SqlEffect(verb="alter database", mutating=True, layer=Layer.DECLARED, keys=keys,
                     details={"sql_kind": "alter database" if keys else "ddl", "database": db},
                     target_kind="database", target_name=db)


def grant_effect(st: Statement, dialect: str) -> SqlEffect:
    """GRANT/REVOKE privileges ON object TO/FROM grantees, for both dialects (key `<dialect>.grant`)."""
    verb = st.kw(0).lower()
    j = 1
    if verb == "revoke" and st.kw(1) == "GRANT" and st.kw(2) == "OPTION" and st.kw(3) == "FOR":
        j = 4
    on = st.index("ON", start=j)
    to = st.index("TO" if verb == "grant" else "FROM", start=j)
    priv_end = on if on >= 0 else to
    privs: list[str] = []
    cur: list[str] = []
    for t in st.toks[j:priv_end if priv_end >= 0 else len(st.toks)]:
        if t.text == ",":
            if cur:
                privs.append(" ".join(cur))
            cur = []
        elif t.text == "(":
            cur.append("(")
        else:
            cur.append(t.value.upper() if t.kind == "word" else t.value)
    if cur:
        privs.append(" ".join(cur).replace("( ", "(").replace(" )", ")"))
    obj = ""
    if on >= 0:
        end = to if to > on else len(st.toks)
        obj = _join_name(st.toks[on + 1:end])
    grantees: list[str] = []
    if to >= 0:
        grantees = _grantees(st, to + 1, dialect)
    all_ = any(p.upper().startswith("ALL") for p in privs)
    details: dict[str, Any] = {"sql_kind": verb, "privileges": privs, "on": obj,
                               "to": grantees[0] if grantees else "", "grantees": grantees, "all": all_}
    if st.index("GRANT", start=max(to, 1)) > 0 and st.index("OPTION", start=max(to, 1)) > 0:
        details["with_grant_option"] = True
    if on < 0:
        details["role_membership"] = True
    scope = {"grantee": grantees[0]} if grantees else {}
    return SqlEffect(verb=verb, mutating=True, layer=Layer.DECLARED,
                     keys=[KeyChange(key=f"{dialect}.grant", value=privs, scope=scope)], details=details,
                     target_kind="grant", target_name=obj)


def _join_name(toks: list[Any]) -> str:
    out = []
    for t in toks:
        if t.kind in ("str", "qid"):
            out.append(t.value)
        elif t.kind == "word" and t.up in ("TABLE", "SCHEMA", "DATABASE", "SEQUENCE", "FUNCTION", "ALL", "TABLES",
                                           "IN", "SEQUENCES", "FUNCTIONS", "PROCEDURE"):
            out.append(t.up + " ")
        else:
            out.append(t.text)
    return "".join(out).strip()


def _grantees(st: Statement, at: int, dialect: str) -> list[str]:
    out: list[str] = []
    cur = ""
    k = at
    while k < len(st.toks):
        t = st.toks[k]
        if t.kind == "word" and t.up in ("WITH", "IDENTIFIED", "CASCADE", "RESTRICT", "GRANTED", "REQUIRE",
                                         "AS"):
            break
        if t.text == ",":
            if cur:
                out.append(cur)
            cur = ""
        elif t.text == "@" or t.text.startswith("@"):
            host = t.text[1:] if len(t.text) > 1 else (st.toks[k + 1].value if k + 1 < len(st.toks) else "%")
            if len(t.text) == 1:
                k += 1
            cur = f"{cur}@'{host}'"
        else:
            cur = f"'{t.value}'" if dialect == "mariadb" else t.value
        k += 1
    if cur:
        out.append(cur)
    if dialect == "mariadb":
        out = [g if "@" in g or g.upper() in ("'PUBLIC'",) else f"{g}@'%'" for g in out]
    return out


def pg_effect(st: Statement) -> SqlEffect:
    """What one PostgreSQL statement does."""
    k = st.kw(0)
    if k == "ALTER" and st.kw(1) == "SYSTEM":
        eff = _setting(st, 2, "alter system", Layer.DECLARED, {})
        eff.details["system"] = True
        eff.target_kind, eff.target_name = "system", "postgresql.auto.conf"
        return eff
    if k == "ALTER" and st.kw(1) in ("ROLE", "USER"):
        return _alter_role(st)
    if k == "ALTER" and st.kw(1) == "DATABASE":
        return _alter_database(st)
    if k in ("SET", "RESET"):
        return _setting(st, 0, k.lower(), Layer.SESSION, {})
    if k in ("GRANT", "REVOKE"):
        return grant_effect(st, "postgres")
    if k == "DISCARD":
        return SqlEffect(verb="discard", mutating=True, layer=Layer.SESSION, details={"sql_kind": "session"})
    if k in ("DO", "CALL", "EXECUTE", "PREPARE"):
        return SqlEffect(verb=k.lower(), mutating=UNKNOWN, details={"sql_kind": "procedural"},
                         opaque_reason=f"{k} runs procedural code whose effect is not visible; "
                                       "run the plain statements instead")
    if k == "LOAD":
        return _load(st)
    if k in ("NOTIFY", "LISTEN", "UNLISTEN", "DEALLOCATE"):
        return SqlEffect(verb=k.lower(), mutating=k in ("NOTIFY", "LOAD"), details={"sql_kind": "session"})
    eff = common_effect(st)
    if eff is not None:
        return eff
    return SqlEffect(verb=(k or "statement").lower(), mutating=UNKNOWN,
                     opaque_reason=f"SQL statement {k or st.text[:20]!r} is not one the guard knows")


def _load(st: Statement) -> SqlEffect:
    """LOAD 'library': a shared library loaded into this session's server process. A bare name comes from the
    server's own library directory (`LOAD 'auto_explain'`); a path (`LOAD '/tmp/x.so'`) is any file, native code
    run with the server's rights."""
    lib = st.toks[1].value if len(st.toks) > 1 else ""
    details: dict[str, Any] = {"sql_kind": "session", "library": lib}
    if not lib.startswith("$libdir/") and ("/" in lib or "\\" in lib):
        details["loads_library"] = lib
    return SqlEffect(verb="load", mutating=True, details=details)
# pgbouncer's admin console: psql to the `pgbouncer` database of a pgbouncer speaks its commands, not SQL. SHOW
# reads; RELOAD rereads its config file (as pg_reload_conf does), RESUME and ENABLE undo PAUSE / SUSPEND and
# DISABLE; PAUSE, SUSPEND (clients wait), DISABLE (new clients refused) and KILL (every client of a database
# dropped) stop the clients (`stops_clients`: SRE-ACCESS-002); SHUTDOWN stops pgbouncer (a restart); SET changes
# its running setting (`pgbouncer.<name>`, until a reload or restart). Anything else is not known.
CONSOLE_DATABASE = "pgbouncer"
_CONSOLE_REPAIRS = frozenset({"RELOAD", "RESUME", "ENABLE", "WAIT_CLOSE"})
_CONSOLE_STOPS = frozenset({"PAUSE", "SUSPEND", "DISABLE", "KILL"})


def console_effect(st: Statement) -> SqlEffect:
    """What one pgbouncer console command does."""
    k = st.kw(0)
    details: dict[str, Any] = {"sql_kind": "console", "console": CONSOLE_DATABASE}
    if k == "SHOW":
        return SqlEffect(verb="show", mutating=False, details={**details, "sql_kind": "read"})
    if k in _CONSOLE_REPAIRS:
        return SqlEffect(verb=k.lower(), mutating=k != "WAIT_CLOSE", details=details)
    if k in _CONSOLE_STOPS:
        return SqlEffect(verb=k.lower(), mutating=True, details={**details, "stops_clients": True,
                                                                 "command": st.text.strip()[:200]})
    if k == "KILL_CLIENT":
        return SqlEffect(verb="kill_client", mutating=True, details=details)
    if k == "SHUTDOWN":
        return SqlEffect(verb="shutdown", mutating=True, details={**details, "restart": True})
    if k == "SET":
        got = _guc_assignment(st, 1)
        if got is not None:
            return SqlEffect(verb="set", mutating=True, layer=Layer.RUNTIME, details=details,
                             keys=[KeyChange(key=f"pgbouncer.{got[0]}", value=got[1])])
    return SqlEffect(verb=(k or "command").lower(), mutating=UNKNOWN, details=details,
                     opaque_reason=f"pgbouncer console command {k or st.text[:20]!r} is not one the guard knows")


@register
class Psql:
    """psql: each SQL statement (or meta-command) it will run."""

    commands = ("psql",)

    def prints_number(self, inv: Invocation) -> bool:
        """`psql -At -c "SELECT count(*) FROM t"`: tuples only (no header, no row count) of a count: a number. Only
        the connection options beside them (no -e/-a echo of the query, no -H/-x/-P format, no -v set)."""
        p = _SPEC.parse(inv.args)
        sql = p.all("-c")
        return p.has("-t", "--tuples-only") and p.flags <= _COUNT_FLAGS and set(p.opts) <= {"-h", "-p", "-U", "-d", "-c"} \
            and len(sql) == 1 and not sql[0].dynamic and len(p.positionals) <= 2 and not inv.args_pending \
            and _counts_only(str(sql[0]))

    def classify(self, inv: Invocation) -> list[Action]:
        p = _SPEC.parse(inv.args)
        host = p.get("-h")
        db = p.get("-d")
        conn = next((w for w in p.positionals
                     if w.dynamic or w.startswith(("postgres://", "postgresql://")) or "=" in w), None)
        if conn is not None and host is None:
            host = _conn_host(str(conn))
        if db is None:
            db = next((w for w in p.positionals if w is not conn), None)
        if db is None and conn is not None:
            db = _conn_db(str(conn))
        console = db is not None and str(db) == CONSOLE_DATABASE
        target = inv.service_target(str(host) if host is not None else None,
                                    CONSOLE_DATABASE if console else "postgres")
        base = {"database": str(db) if db is not None else None, "user": str(p.get("-U")) if p.get("-U") else None}
        if conn is not None:
            base["dsn"] = str(conn) if conn.dynamic else "<connection string>"
            if not conn.dynamic and "options" in str(conn).lower():
                # `options=-c standard_conforming_strings=off`: server settings for the whole session, which may
                # change how every statement is lexed.
                return [inv.action("psql", "connect", target=target, mutating=UNKNOWN, details=base,
                                   opaque_reason="the connection string may set server options for the session "
                                                 "(options=...), which change how the SQL is read; connect without "
                                                 "them")]
        sources: list[str] = [str(c) for c in p.all("-c")]
        n_commands = len(sources)
        if any(getattr(c, "has_substitution", False) for c in p.all("-c")):
            return [inv.action("psql", "query", target=target, mutating=UNKNOWN,
                               opaque_reason="the SQL is computed at run time ($(...)); run the plain SQL instead",
                               details=base)]
        piped = next((o for o in p.all("-o") if str(o).lstrip().startswith("|") or o.dynamic), None)
        if piped is not None:
            # `-o '|cmd'` pipes every result into a shell command, as `\\o |cmd` does.
            return [inv.action("psql", "output", target=target, mutating=UNKNOWN,
                               opaque_reason=f"psql -o {str(piped)[:60]!r} sends the output to a shell command (or "
                                             "to a place known only as it runs); write it to a file instead",
                               details={**base, "output": str(piped)})]
        files = [str(f) for f in p.all("-f")]
        other = next((f for f in files if f not in _STDIN_FILES), None)
        if other is not None and (sources or any(f in _STDIN_FILES for f in files)
                                  or any(f.dynamic for f in p.all("-f"))):
            # Mixed with -c or stdin, the order psql runs them in (which decides how each is lexed) is the
            # command line's, which the option parser does not keep: not judged.
            return [inv.action("psql", "run file", target=target, mutating=UNKNOWN,
                               opaque_reason=f"psql -f {other} beside -c or stdin: run the file on its own",
                               details={**base, "file": other})]
        if other is not None:
            # `psql -f fix.sql` (each -f in order): the files are read now, as `kubectl apply -f` reads its
            # manifest, and judged as psql reads them (line by line, meta-commands and :variables).
            total = 0
            for f in files:
                try:
                    text = read_at_decision(f, inv.where)
                except Unreadable as e:
                    return [inv.action("psql", "run file", target=target, mutating=UNKNOWN,
                                       opaque_reason=f"psql -f {f}: the file's SQL cannot be read now ({e})",
                                       details={**base, "file": f})]
                total += len(text)
                if total > _MAX_FILES_TEXT:
                    return [inv.action("psql", "run file", target=target, mutating=UNKNOWN,
                                       opaque_reason=f"psql -f: the files come to more than {_MAX_FILES_TEXT} "
                                                     "characters",
                                       details={**base, "file": f})]
                sources.append(text)
            files = []
        if sources and (files or (inv.stdin is not None and inv.stdin.text is not None)):
            # psql runs every -c and -f in order, and `-f -` (or /dev/stdin) is its stdin: that SQL runs too
            # (`psql -c 'SELECT 1' -f -` ran what the guard never saw). A heredoc beside -c is judged as well.
            st = inv.stdin
            if st is None or st.text is None:
                if files:
                    return [inv.action("psql", "query", target=target, mutating=UNKNOWN,
                                       opaque_reason="psql -f - runs SQL from stdin, which is not visible"
                                                     + (f" (it comes from {st.producer or st.source})" if st else ""),
                                       details=base)]
            else:
                sources = sources + [st.text]
        if not sources:
            st = inv.stdin
            if st is None:
                if inv.args_pending:
                    return [inv.action("psql", "query", target=target, mutating=UNKNOWN,
                                       opaque_reason="psql arguments are read from stdin at run time", details=base)]
                return [inv.action("psql", "session", target=target, mutating=UNKNOWN,
                                   opaque_reason="an interactive psql session: the SQL typed into it is not visible",
                                   details=base)]
            if st.text is None:
                return [inv.action("psql", "query", target=target, mutating=UNKNOWN,
                                   opaque_reason=f"the SQL comes from {st.producer or st.source} and is not visible",
                                   details=base)]
            sources = [st.text]
        actions: list[Action] = []
        reading = _PsqlReading(variables=_variables(p.all("-v")), definable=not p.has("-X", "--no-psqlrc"))
        for i, src in enumerate(sources):
            # psql sends -c text as it is; what it reads from stdin or a file it reads line by line, meta-commands
            # and :variables included.
            reading.interpolates = i >= n_commands
            actions += self._sql(inv, src, target, base, reading)
        if not actions:
            actions.append(inv.action("psql", "connect", target=target, mutating=False, details=base))
        return actions

    def _sql(self, inv: Invocation, sql: str, target: Target, base: dict[str, Any],
             reading: "_PsqlReading") -> list[Action]:
        """SQL as psql reads it: a backslash outside strings, quoted names and comments (as the server's lexer
        tells them apart) begins a meta-command that runs to the end of its line, wherever on the line it stands
        (`SELECT ... \\gexec`, `SELECT 1 \\! cmd`); the SQL before it is sent as it is."""
        if reading.lexing is not None:
            return [_opaque_rest(inv, target, base, reading.lexing)]
        if reading.interpolates:
            sql, why = _interpolate(sql, reading)
            if why is not None:
                return [inv.action("psql", "query", target=target, mutating=UNKNOWN, opaque_reason=why,
                                   details={**base, "statement": sql})]
        out: list[Action] = []
        pos = 0
        metas = rescans = 0
        try:
            toks = token_spans(sql)
        except SqlSyntaxError as e:
            return [_unlexed(inv, target, base, sql, e)]
        k = 0  # the next token to look at
        while pos < len(sql) and reading.lexing is None:
            while k < len(toks) and (toks[k][0] < pos or not toks[k][2]):
                k += 1
            if k == len(toks):
                if sql[pos:].strip():
                    out += self._statements(inv, sql[pos:], target, base, reading)
                pos = len(sql)
                break
            a = toks[k][0]
            metas += 1
            if metas > _MAX_METAS:
                out.append(_opaque_rest(inv, target, base, f"more than {_MAX_METAS} psql meta-commands"))
                pos = len(sql)
                break
            if sql.startswith("\\;", a):
                # `SELECT 1 \\; DROP TABLE t`: psql sends both statements together; `\\;` only keeps the
                # buffer from being sent at that point.
                if sql[pos:a].strip():
                    out += self._statements(inv, sql[pos:a], target, base, reading)
                pos = a + 2
                continue
            eol = sql.find("\n", a)
            eol = len(sql) if eol < 0 else eol
            if sql[pos:a].strip():
                out += self._statements(inv, sql[pos:a], target, base, reading)
            pos = a
            if reading.lexing is not None:
                break
            out += self._meta(inv, sql[a:eol].strip(), target, base, reading)
            pos = eol
            # psql's lexer starts afresh after the meta-command's line. Where the server's lexer read a token across
            # that line end (`\\echo 'x` then a line), the tokens after it are read again from there.
            if any(s < eol < e for s, e, _ in toks[k:k + 1 + _spanning(toks, k, eol)]):
                rescans += 1
                if rescans > _MAX_RESCANS:
                    out.append(_opaque_rest(inv, target, base, f"more than {_MAX_RESCANS} psql meta-commands "
                                                                "whose line the server's lexer reads on past"))
                    pos = len(sql)
                    break
                try:
                    toks = [(s + eol, e + eol, b) for s, e, b in token_spans(sql[eol:])]
                except SqlSyntaxError as e:
                    out.append(_unlexed(inv, target, base, sql[eol:], e))
                    pos = len(sql)
                    break
                k = 0
        if reading.lexing is not None and sql[pos:].strip():
            out.append(_opaque_rest(inv, target, base, reading.lexing))
        return out

    def _statements(self, inv: Invocation, sql: str, target: Target, base: dict[str, Any],
                    reading: "_PsqlReading") -> list[Action]:
        if base.get("database") == CONSOLE_DATABASE:
            # pgbouncer's console speaks its own commands, not SQL.
            return [to_action(inv, "psql", console_effect(st), st.text, target, base)
                    for st in statements(sql, pg_strings=True)]
        got = read_sql(sql, pg_effect)
        if got.unreadable is not None:
            return [inv.action("psql", "query", target=target, mutating=UNKNOWN, opaque_reason=got.unreadable,
                               details={**base, "statement": sql.strip()})]
        effs = [ps.effect for ps in got.statements]
        hold_locks(effs)
        out = []
        for n, ps in enumerate(got.statements, start=1):
            eff, st = ps.effect, ps.tokens
            if not eff.skip:
                # The statement a WITH list leads to (not one of its CTEs): every CTE that writes is an action too.
                after_with = st is not None and st.kw(0) == "WITH" and not eff.details.get("in_cte") \
                    and eff.mutating is not False
                out.append(to_action(inv, "psql", eff, ps.written, target, base))
                if st is not None and (eff.details.get("in_cte") or after_with):
                    # Every data-modifying CTE writes, not only the first (`WITH a AS (DELETE ... WHERE id = 1),
                    # b AS (DELETE FROM users) SELECT 1` deletes every user); `eff` is the first CTE's, or the
                    # statement the WITH list leads to.
                    ctes = cte_dml_effects(st)
                    out += [to_action(inv, "psql", e, ps.written, target, base)
                            for e in (ctes[1:] if eff.details.get("in_cte") else ctes)]
            if ps.changes_lexing:
                reading.lexing = ps.changes_lexing
                break
        if reading.lexing is not None and n < len(got.statements):
            out.append(_opaque_rest(inv, target, base, reading.lexing))
        return out

    def _meta(self, inv: Invocation, line: str, target: Target, base: dict[str, Any],
              reading: "_PsqlReading") -> list[Action]:
        cmd = line.split(None, 1)[0]
        # \\g and \\gx send the query; with an argument they write its output to a file or pipe it to a command.
        sends_elsewhere = cmd in ("\\g", "\\gx") and len(line.split(None, 1)) > 1
        if cmd in ("\\!", "\\setenv", "\\i", "\\ir", "\\include", "\\include_relative", "\\o", "\\out", "\\w",
                   "\\write", "\\e", "\\edit", "\\ef", "\\ev", "\\gexec", "\\copy", "\\lo_import", "\\lo_unlink",
                   "\\password") or cmd.startswith("\\!") or sends_elsewhere:
            return [inv.action("psql", cmd, target=target, mutating=UNKNOWN,
                               opaque_reason=f"psql meta-command {cmd} runs or writes something not visible",
                               details={**base, "meta": line})]
        if cmd in _DEFINES_VARIABLES:
            reading.definable = True  # later :names may be defined, with values not known here
        if cmd == "\\encoding":
            arg = line.split(None, 1)[1].strip() if len(line.split(None, 1)) > 1 else ""
            if arg and not lexing_value_known("client_encoding", arg.strip("'")):
                reading.lexing = f"\\encoding {arg[:20]} changes how the statements after it are read"
        return [inv.action("psql", cmd, target=target, mutating=False, details={**base, "meta": line})]


# More meta-commands than this in one text, or more than _MAX_RESCANS whose line the server's lexer reads on past
# (each makes the text after it be scanned again): the rest is opaque, so the reading stays linear in the text.
_MAX_METAS = 256
_MAX_RESCANS = 16


def _spanning(toks: list[tuple[int, int, bool]], k: int, eol: int) -> int:
    """How many tokens after index k start before `eol` (the meta-command's own words, which its line holds)."""
    n = 0
    while k + 1 + n < len(toks) and toks[k + 1 + n][0] < eol:
        n += 1
    return n


def _unlexed(inv: Invocation, target: Target, base: dict[str, Any], sql: str, e: Exception) -> Action:
    # Text the server's lexer rejects (an unterminated string or comment) is refused whole: where psql would see a
    # meta-command in it cannot be known.
    return inv.action("psql", "query", target=target, mutating=UNKNOWN, details={**base, "statement": sql.strip()},
                      opaque_reason=f"PostgreSQL's lexer does not accept this SQL ({str(e)[:120]}); only SQL the "
                                    "server reads as it is written can be judged")
# psql meta-commands that define variables (`\\set`, `\\gset` from a query's columns, `\\getenv`, `\\prompt`).
_DEFINES_VARIABLES = frozenset({"\\set", "\\gset", "\\getenv", "\\prompt"})
# psql's own variables, set whenever it runs (`:DBNAME`, `:USER` ...): a reference to one is interpolated.
_BUILTIN_VARIABLES = frozenset({
    "AUTOCOMMIT", "COMP_KEYWORD_CASE", "DBNAME", "ECHO", "ECHO_HIDDEN", "ENCODING", "ERROR", "FETCH_COUNT",
    "HIDE_TABLEAM", "HIDE_TOAST_COMPRESSION", "HISTCONTROL", "HISTFILE", "HISTSIZE", "HOST", "IGNOREEOF", "LASTOID",
    "LAST_ERROR_MESSAGE", "LAST_ERROR_SQLSTATE", "ON_ERROR_ROLLBACK", "ON_ERROR_STOP", "PORT", "PROMPT1", "PROMPT2",
    "PROMPT3", "QUIET", "ROW_COUNT", "SERVER_VERSION_NAME", "SERVER_VERSION_NUM", "SHOW_ALL_RESULTS", "SHOW_CONTEXT",
    "SINGLELINE", "SINGLESTEP", "SQLSTATE", "USER", "VERBOSITY", "VERSION", "VERSION_NAME", "VERSION_NUM",
})


@dataclass
class _PsqlReading:
    """What psql's reading of one invocation carries from text to text."""

    variables: dict[str, str | None] = field(default_factory=dict)  # -v name=value (None: computed)
    definable: bool = False  # a psqlrc or a \\set may define variables not known here
    interpolates: bool = False  # this text is read by psql's lexer (stdin, -f), not sent as it is (-c)
    lexing: str | None = None  # why the text from here on is lexed differently from how the guard reads it


def _variables(words: list[Any]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for w in words:
        name, eq, value = str(w).partition("=")
        if eq:
            out[name] = None if getattr(w, "dynamic", False) else value
    return out


def _interpolate(sql: str, reading: _PsqlReading) -> tuple[str, str | None]:
    """`sql` with psql's variable references replaced as psql replaces them (`:x` by the value, `:'x'` quoted as a
    literal, `:"x"` as a name), when every value is known; else why it cannot be read."""
    refs = psql_variables(sql)
    if not refs:
        return sql, None  # none, or a text the lexer rejects (the parser then refuses it)
    out, pos = [], 0
    for a, b, form, name in refs:
        value = reading.variables.get(name)
        if name not in reading.variables:
            if not (reading.definable or name in _BUILTIN_VARIABLES or form == ":{?"):
                continue  # a variable nothing defines: psql leaves the text as it is
            return sql, (f"psql replaces {sql[a:b]} with a variable's value, known only as psql runs; write the "
                         "value in the SQL instead")
        if value is None:
            return sql, f"psql variable {name} is computed at run time, and {sql[a:b]} reads it"
        if ":" in value:
            return sql, f"psql variable {name} holds another variable reference"
        quoted = {":": value, ":'": "'" + value.replace("'", "''") + "'",
                  ':"': '"' + value.replace('"', '""') + '"'}[form]
        out += [sql[pos:a], quoted]
        pos = b
    out.append(sql[pos:])
    return "".join(out), None


def _opaque_rest(inv: Invocation, target: Target, base: dict[str, Any], why: str) -> Action:
    return inv.action("psql", "query", target=target, mutating=UNKNOWN, details=base,
                      opaque_reason=f"{why}: the SQL after it is not lexed as the guard reads it; run it in a "
                                    "separate psql")


def _counts_only(sql: str) -> bool:
    """One `SELECT count(...)` as the server parses it (comments and quoting as the server reads them)."""
    got = read_sql(sql, pg_effect)
    return got.unreadable is None and len(got.statements) == 1 \
        and got.statements[0].effect.details.get("node") == "SelectStmt" \
        and counts_only(got.statements[0].canonical, pg_strings=True)


# What `psql -f` reads as its stdin.
_STDIN_FILES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
# The most text the -f files of one psql command may hold together (each is at most MAX_READ_AT_DECISION).
_MAX_FILES_TEXT = 4 * 1024 * 1024


def _conn_db(conn: str) -> str | None:
    """The database a connection string names (`postgresql://u@h:6432/pgbouncer`, `dbname=pgbouncer host=h`)."""
    if conn.startswith("$"):
        return None
    if "://" in conn:
        path = conn.split("://", 1)[1].split("?", 1)[0]
        return path.split("/", 1)[1] or None if "/" in path else None
    for part in conn.split():
        k, _, v = part.partition("=")
        if k == "dbname":
            return v
    return None


def _conn_host(conn: str) -> str | None:
    if conn.startswith("$"):
        return None
    if "://" in conn:
        rest = conn.split("://", 1)[1]
        hostport = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        return hostport.split(":", 1)[0] or None
    for part in conn.split():
        k, _, v = part.partition("=")
        if k == "host":
            return v
    return None


def to_action(inv: Invocation, tool: str, eff: SqlEffect, text: str, target: Target,
              base: dict[str, Any]) -> Action:
    """A SqlEffect as an Action: the connection is the target, the statement text goes into details, whole (rules
    read it: a statement cut short could hide the words that make it a write)."""
    details = {**{k: v for k, v in base.items() if v is not None}, **eff.details, "statement": text}
    if eff.target_kind:
        details["object_kind"] = eff.target_kind
        details["object_name"] = eff.target_name
    return inv.action(tool, eff.verb, target=target, keys=eff.keys, layer=eff.layer if eff.mutating else Layer.NONE,
                      mutating=eff.mutating, opaque_reason=eff.opaque_reason if eff.mutating == UNKNOWN else None,
                      details=details)
