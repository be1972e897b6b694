"""The `psql` client of the operator shell (shared by the Saleor and slack-spine substrates): argument parsing, connecting, and psql's output formats.

Called by the substrates' command handlers (for `psql ...` and `kubectl exec postgres-0 -- psql ...`). It
opens a real backend on the twin's `PostgresServer` (so the session shows in pg_stat_activity and inherits the
catalog settings of its role and database), runs the statements through `arena.twin.pg.sql`, and prints what
psql prints: aligned tables with `(N rows)`, command tags, `-A`/`-t`/`-x`, and `ERROR:` lines on stderr.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import unquote, urlparse

from arena.twin.pg.postgres import ConnectError, PostgresServer
from arena.twin.pg.sql import (Interval, Result, SelfTerminated, SQLError, SqlSession, Timestamp, _pg_text,
                                   split_statements)

__all__ = ["PsqlOutput", "ConnInfo", "parse_conninfo", "run_psql", "format_result"]


@dataclass
class PsqlOutput:
    """What one psql invocation printed, its exit status and the virtual time its statements took."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    duration_s: float = 0.0


@dataclass
class ConnInfo:
    """Where psql connects and as whom."""

    host: str | None = None  # None: the local socket, as psql defaults to
    port: int = 5432
    user: str = "root"  # psql's default is the OS user; the operator pod runs as root
    dbname: str | None = None
    password: str | None = None
    application_name: str = "psql"


def parse_conninfo(text: str, info: ConnInfo) -> ConnInfo:
    """A postgresql:// URI or a key=value conninfo string, over the defaults already in `info`."""
    if text.startswith(("postgresql://", "postgres://")):
        u = urlparse(text)
        if u.hostname:
            info.host = u.hostname
        if u.port:
            info.port = u.port
        if u.username:
            info.user = unquote(u.username)
        if u.password is not None:
            info.password = unquote(u.password)
        if u.path and u.path != "/":
            info.dbname = unquote(u.path.lstrip("/"))
        for part in (u.query or "").split("&"):
            if part.startswith("application_name="):
                info.application_name = unquote(part.split("=", 1)[1])
        return info
    if "=" in text:
        for part in shlex.split(text):
            k, _, v = part.partition("=")
            if k == "host":
                info.host = v
            elif k == "port":
                info.port = int(v)
            elif k == "user":
                info.user = v
            elif k == "dbname":
                info.dbname = v
            elif k == "password":
                info.password = v
            elif k == "application_name":
                info.application_name = v
        return info
    info.dbname = text
    return info


@dataclass
class _Opts:
    commands: list[str] = field(default_factory=list)
    unaligned: bool = False
    tuples_only: bool = False
    expanded: bool = False
    quiet: bool = False
    field_sep: str = "|"
    on_error_stop: bool = False
    file: str | None = None
    single_transaction: bool = False


_USAGE_ERR = "psql: error: {msg}\nTry \"psql --help\" for more information."


def _parse_args(argv: list[str], info: ConnInfo) -> _Opts:
    o = _Opts()
    positional: list[str] = []
    i = 0

    def val() -> str:
        nonlocal i
        if i + 1 >= len(argv):
            raise ValueError(f"option requires an argument -- '{argv[i].lstrip('-')}'")
        i += 1
        return argv[i]

    while i < len(argv):
        a = argv[i]
        if a in ("-c", "--command"):
            o.commands.append(val())
        elif a.startswith("--command="):
            o.commands.append(a.split("=", 1)[1])
        elif a.startswith("-c") and len(a) > 2:
            o.commands.append(a[2:])
        elif a in ("-d", "--dbname"):
            parse_conninfo(val(), info)
        elif a.startswith("--dbname="):
            parse_conninfo(a.split("=", 1)[1], info)
        elif a in ("-U", "--username"):
            info.user = val()
        elif a.startswith("--username="):
            info.user = a.split("=", 1)[1]
        elif a.startswith("-U") and len(a) > 2:
            info.user = a[2:]
        elif a in ("-h", "--host"):
            info.host = val()
        elif a in ("-p", "--port"):
            info.port = int(val())
        elif a in ("-f", "--file"):
            o.file = val()
        elif a in ("-v", "--set"):
            kv = val()
            if kv.replace(" ", "").upper() == "ON_ERROR_STOP=1":
                o.on_error_stop = True
        elif a.startswith("-v") and "ON_ERROR_STOP" in a.upper():
            o.on_error_stop = True
        elif a in ("-F", "--field-separator"):
            o.field_sep = val()
        elif a in ("-w", "--no-password", "-W", "--password", "-X", "--no-psqlrc", "-e", "--echo-queries",
                   "-b", "--echo-errors", "-n", "--no-readline"):
            pass
        elif a in ("-1", "--single-transaction"):
            o.single_transaction = True
        elif a.startswith("--") and a[2:] in ("no-align", "tuples-only", "expanded", "quiet"):
            o.unaligned |= a == "--no-align"
            o.tuples_only |= a == "--tuples-only"
            o.expanded |= a == "--expanded"
            o.quiet |= a == "--quiet"
        elif a.startswith("-") and len(a) > 1 and not a.startswith("--") and set(a[1:]) <= set("AtxqXwWeb"):
            o.unaligned |= "A" in a
            o.tuples_only |= "t" in a
            o.expanded |= "x" in a
            o.quiet |= "q" in a
        elif a.startswith("-"):
            raise ValueError(f"unrecognized option '{a}'" if a.startswith("--") else f"invalid option -- '{a[1:]}'")
        else:
            positional.append(a)
        i += 1
    if positional:
        parse_conninfo(positional[0], info)
        if len(positional) > 1:
            info.user = positional[1]
    return o


def format_result(r: Result, *, unaligned: bool = False, tuples_only: bool = False, expanded: bool = False,
                  field_sep: str = "|") -> str:
    """Print one result the way psql does."""
    if not r.columns:
        return r.tag + "\n" if r.tag else ""  # psql prints a command's tag with -A and -t too (only -q hides it)
    cells = [[_pg_text(v) for v in row] for row in r.rows]
    if unaligned:
        lines = [] if tuples_only else [field_sep.join(r.columns)]
        if expanded:
            lines = []
            for row in cells:
                lines.extend(f"{c}{field_sep}{v}" for c, v in zip(r.columns, row))
                lines.append("")
            return "\n".join(lines).rstrip("\n") + "\n"
        lines.extend(field_sep.join(row) for row in cells)
        if not tuples_only:
            lines.append(_footer(len(cells)))
        return "\n".join(lines) + "\n"
    if expanded:
        if not cells:
            return "(0 rows)\n\n"
        w = max(len(c) for c in r.columns)
        valw = max((len(v) for row in cells for v in row), default=0)
        out = []
        for n, row in enumerate(cells, start=1):
            head = f"-[ RECORD {n} ]"
            # psql draws the record header across both columns with a '+' above the separator.
            if len(head) <= w + 1:
                out.append(head + "-" * (w + 1 - len(head)) + "+" + "-" * (valw + 1))
            else:
                out.append(head + "-" * max(0, w + 3 + valw - len(head)))
            out.extend(f"{c.ljust(w)} | {v}" for c, v in zip(r.columns, row))
        return "\n".join(out) + "\n\n"
    numeric = [all(_is_num(row[i]) for row in r.rows if row[i] is not None) and any(
        row[i] is not None for row in r.rows) for i in range(len(r.columns))]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(r.columns)]
    lines = []
    if not tuples_only:
        lines.append("|".join(" " + c.center(w) + " " for c, w in zip(r.columns, widths)).rstrip("\n"))
        lines.append("+".join("-" * (w + 2) for w in widths))
    for row in cells:
        parts = []
        for i, (v, w) in enumerate(zip(row, widths)):
            text = v.rjust(w) if numeric[i] else v.ljust(w)
            parts.append(" " + text + " ")
        lines.append("|".join(parts).rstrip())
    if not tuples_only:
        lines.append(_footer(len(cells)))
    return "\n".join(lines) + "\n\n"


def _footer(n: int) -> str:
    return f"({n} row{'s' if n != 1 else ''})"


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, (bool, Timestamp, Interval))


def _error_text(e: SQLError, stmt: str) -> str:
    lines = [f"ERROR:  {e.message}"]
    if e.position is not None and e.sqlstate == "42601":
        first = stmt.splitlines()[0] if stmt else ""
        lines.append(f"LINE 1: {first}")
        lines.append(" " * (8 + max(0, e.position - 1)) + "^")
    if e.hint:
        lines.append(f"HINT:  {e.hint}")
    return "\n".join(lines) + "\n"


_META_HELP = {"\\q", "\\x", "\\conninfo", "\\du", "\\l", "\\drds", "\\dt"}


def run_psql(argv: list[str], server: PostgresServer, *, now: Callable[[], float], stdin: str = "",
             env: Mapping[str, str] | None = None, passwords_required: bool = True,
             on_event: Callable[[str, dict[str, Any]], None] | None = None,
             client_addr: str = "10.42.0.9", local_socket: bool = False) -> PsqlOutput:
    """Run one psql invocation against the twin's server; the backend lives for the invocation only.

    Connection defaults come from libpq's environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE) as in
    the real client; `local_socket` says a server listens on the default Unix socket (inside the postgres pod).
    """
    env = env or {}
    info = ConnInfo(host=env.get("PGHOST") or None, port=int(env.get("PGPORT", "5432")),
                    user=env.get("PGUSER", "postgres" if local_socket else "root"),
                    dbname=env.get("PGDATABASE") or None, password=env.get("PGPASSWORD") or None)
    try:
        opts = _parse_args(argv, info)
    except ValueError as e:
        return PsqlOutput(stderr=f"psql: {e}\nTry \"psql --help\" for more information.\n", exit_code=1)
    where = (f'connection to server at "{info.host}" (10.43.12.7), port {info.port}' if info.host is not None
             else 'connection to server on socket "/var/run/postgresql/.s.PGSQL.5432"')
    if info.host is None and not local_socket:
        return PsqlOutput(stderr='psql: error: connection to server on socket "/var/run/postgresql/.s.PGSQL.5432" '
                                 "failed: No such file or directory\n\tIs the server running locally and accepting "
                                 'connections on that socket?\n', exit_code=2)
    if info.host is not None and info.host not in server.hostnames:
        return PsqlOutput(stderr=f'psql: error: could not translate host name "{info.host}" to address: '
                                 "Name or service not known\n", exit_code=2)
    if info.port != 5432:
        return PsqlOutput(stderr=f'psql: error: connection to server at "{info.host or "localhost"}" (10.43.12.7), port '
                                 f"{info.port} failed: Connection refused\n\tIs the server running on that host "
                                 "and accepting TCP/IP connections?\n", exit_code=2)
    dbname = info.dbname or info.user
    role = server.roles.get(info.user)
    if passwords_required and info.host is not None and role is not None and role.password and info.password != role.password:
        msg = ("fe_sendauth: no password supplied" if info.password is None
               else f'FATAL:  password authentication failed for user "{info.user}"')
        return PsqlOutput(stderr=f"psql: error: {where} failed: {msg}\n", exit_code=2)
    try:
        backend = server.connect(info.user, dbname, now=now(), application_name=info.application_name,
                                 client_addr=client_addr)
    except ConnectError as e:
        return PsqlOutput(stderr=f"psql: error: {where} failed: {e}\n", exit_code=2)
    backend.state = "active"
    session = SqlSession(server, backend, now, on_event)
    out, err = [], []
    code = 0
    duration = 0.0
    script: list[tuple[str, bool]] = []  # (text, is -c string)
    if opts.commands:
        script = [(c, True) for c in opts.commands]
    elif opts.file not in (None, "-"):
        server.disconnect(backend.pid)
        return PsqlOutput(stderr=f"psql: error: {opts.file}: No such file or directory\n", exit_code=1)
    else:
        script = [(stdin, False)]
    fmt = dict(unaligned=opts.unaligned, tuples_only=opts.tuples_only, expanded=opts.expanded,
               field_sep=opts.field_sep)
    # -1 / --single-transaction: BEGIN before the first command and COMMIT after the last (ROLLBACK once one
    # failed); after a failure the rest is refused as in an aborted transaction block.
    whole = _snapshot(server) if opts.single_transaction else None
    aborted = False
    if opts.single_transaction:
        session.execute("BEGIN")
    try:
        for text, is_c in script:
            stmts, metas = _split_script(text)
            if is_c and metas and not stmts:
                for _, m in metas:
                    out.append(_meta(m, server, session, fmt))
                continue
            # psql -c sends the whole string as one query: one implicit transaction, all or nothing.
            session.implicit_tx = is_c and len(stmts) > 1 and not opts.single_transaction
            snapshot = _snapshot(server) if session.implicit_tx else None
            for kind, stmt in _interleave(stmts, metas, is_c):
                if kind == "meta":
                    rendered = _meta(stmt, server, session, fmt)
                    if rendered == "\\x":
                        opts.expanded = not opts.expanded
                        fmt["expanded"] = opts.expanded
                        out.append(f"Expanded display is {'on' if opts.expanded else 'off'}.\n")
                    elif rendered == "\\q":
                        raise _Quit()
                    else:
                        out.append(rendered)
                    continue
                if aborted:
                    err.append(_error_text(SQLError("current transaction is aborted, commands ignored until end "
                                                    "of transaction block", sqlstate="25P02"), stmt))
                    continue
                try:
                    try:
                        res = session.execute(stmt)
                    except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError) as bug:
                        # Say so rather than crash the episode: the statement is outside what the twin models.
                        raise SQLError(f"the twin could not evaluate this statement ({type(bug).__name__})",
                                       sqlstate="XX000") from bug
                    duration += res.duration_s
                    if not (opts.quiet and not res.columns):
                        out.append(format_result(res, **fmt))
                except SQLError as e:
                    duration += e.duration_s
                    err.append(_error_text(e, stmt))
                    code = 1
                    if snapshot is not None:
                        _restore(server, snapshot)
                        break
                    if whole is not None:
                        _restore(server, whole)
                        aborted = True
                    if opts.on_error_stop:
                        code = 3
                        raise _Quit()
            session.implicit_tx = False
    except SelfTerminated:
        err.append("FATAL:  terminating connection due to administrator command\n"
                   "server closed the connection unexpectedly\n\tThis probably means the server terminated "
                   "abnormally\n\tbefore or while processing the request.\n")
        code = 2
    except _Quit:
        pass
    finally:
        if opts.single_transaction and backend.alive and session.in_tx:
            session.execute("ROLLBACK" if aborted or code == 3 else "COMMIT")
        server.disconnect(backend.pid)
    if not opts.commands and code == 1:
        code = 0  # psql reading a script keeps going past errors and exits 0 without ON_ERROR_STOP
    return PsqlOutput(stdout="".join(out), stderr="".join(err), exit_code=code, duration_s=duration)


class _Quit(Exception):
    """\\q or ON_ERROR_STOP ended the script."""


def _split_script(text: str) -> tuple[list[str], list[tuple[int, str]]]:
    """SQL statements and backslash meta-commands (with their order) of a script."""
    stmts: list[str] = []
    metas: list[tuple[int, str]] = []
    buf: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("\\"):
            if buf and "".join(buf).strip():
                stmts.extend(split_statements("\n".join(buf)))
                buf = []
            metas.append((len(stmts), s))
            continue
        buf.append(line)
    if buf:
        stmts.extend(split_statements("\n".join(buf)))
    return stmts, metas


def _interleave(stmts: list[str], metas: list[tuple[int, str]], is_c: bool):
    mi = 0
    for i, st in enumerate(stmts):
        while mi < len(metas) and metas[mi][0] <= i:
            yield "meta", metas[mi][1]
            mi += 1
        yield "sql", st
    while mi < len(metas):
        yield "meta", metas[mi][1]
        mi += 1


def _meta(cmd: str, server: PostgresServer, session: SqlSession, fmt: dict) -> str:
    parts = cmd.split()
    name = parts[0]
    if name in ("\\x", "\\q"):
        return name
    if name == "\\conninfo":
        b = session.backend
        return (f'You are connected to database "{b.database}" as user "{b.role}" on host "postgres" '
                f'(address "10.43.12.7") at port "5432".\n')
    queries = {
        "\\du": "SELECT rolname AS \"Role name\", rolconnlimit AS \"Connection limit\", rolconfig AS \"Config\" "
                "FROM pg_roles ORDER BY rolname",
        "\\l": "SELECT datname AS \"Name\", datconnlimit AS \"Connection limit\" FROM pg_database ORDER BY datname",
    }
    if name == "\\drds":
        res = Result(columns=["Role", "Database", "Settings"])
        for (d, r), settings in sorted(server.db_role_setting.items()):
            from arena.twin.pg.postgres import GUCS, format_guc_value

            if len(parts) > 1 and r != parts[1] and parts[1] != "*":
                continue
            if len(parts) > 2 and d != parts[2]:
                continue
            res.rows.append([r, d, "\n".join(f"{k}={format_guc_value(GUCS[k], v)}" for k, v in sorted(settings.items()))])
        text = format_result(res, **fmt)
        return "        List of settings\n" + text if not fmt.get("unaligned") else text
    if name == "\\dt":
        res = Result(columns=["Schema", "Name", "Type", "Owner"],
                     rows=[["public", t, "table", server.table_owner] for t in sorted({**server.tables,
                                                                                 **server.extra_tables})])
        return "              List of relations\n" + format_result(res, **fmt)
    if name in queries:
        try:
            return format_result(session.execute(queries[name]), **fmt)
        except SQLError as e:
            return _error_text(e, queries[name])
    return f"invalid command {name}\nTry \\? for help.\n"


def _snapshot(server: PostgresServer) -> dict:
    import copy

    return {"auto_conf": dict(server.auto_conf), "db_role_setting": copy.deepcopy(server.db_role_setting),
            "connlimits": {r: server.roles[r].connlimit for r in server.roles},
            "dbconnlimits": {d: server.databases[d].connlimit for d in server.databases}}


def _restore(server: PostgresServer, snap: dict) -> None:
    """Roll back the catalog and file writes of a failed implicit transaction (terminations cannot roll back)."""
    server.auto_conf = snap["auto_conf"]
    server.db_role_setting = snap["db_role_setting"]
    for r, n in snap["connlimits"].items():
        server.roles[r].connlimit = n
    for d, n in snap["dbconnlimits"].items():
        server.databases[d].connlimit = n
