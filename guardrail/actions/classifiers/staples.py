"""The read-only staples of an operator shell (cat, grep, jq, ps, dig ...), awk, sleep, kill and systemctl.

Registered for the names in catalogue.yaml's `read_only` list (minus sed, which `files` owns); called by
`Normaliser.dispatch`. A staple only reads; what its redirections write is classified by the shell walker.
awk is read-only unless its program runs commands or writes files.
"""

from __future__ import annotations

import re
import shlex

from guardrail.actions.catalogue import catalogue
from guardrail.actions.classifiers.base import OptionSpec, register
from guardrail.actions.invocation import Invocation
from guardrail.actions.model import UNKNOWN, Action, Target
from guardrail.actions.filewrite import file_write
from guardrail.actions.words import Word

__all__ = ["ReadOnly", "Awk", "Sleep", "Kill", "Netcat", "ServiceManager", "parse_duration", "kill_args",
           "leaves_running"]

_OWNED_ELSEWHERE = {"sed", "awk", "gawk", "mawk", "nawk"}


@register
class ReadOnly:
    """Commands that only read."""

    commands = tuple(c for c in catalogue().read_only if c not in _OWNED_ELSEWHERE)

    def prints_number(self, inv: Invocation) -> bool:
        """Does it print only numbers (`_NUMBERS`)?"""
        keeps = _KEEPS_NUMBERS.get(inv.name) if inv.stdin is not None and inv.stdin.number else None
        check = keeps or _NUMBERS.get(inv.name)
        return check is not None and not inv.args_pending and not any(a.splits for a in inv.args) \
            and check(list(inv.args))

    def classify(self, inv: Invocation) -> list[Action]:
        args = list(inv.args)
        check = _UNLESS.get(inv.name)
        found = check(args) if check is not None else None
        if found is None:
            return [inv.action(inv.name, inv.name, mutating=False)]
        kind, what = found
        if kind == "write":
            return [inv.action(inv.name, inv.name, mutating=False), file_write(inv, what, by=inv.name)]
        if kind == "runs":
            return [inv.opaque(inv.name, f"{inv.name} {what}: it runs a program the guard does not see",
                               tool=inv.name)]
        # kind == "changes": the host's own state (its clock, its logs, its network)
        return [inv.action(inv.name, what, mutating=True, details={"host_change": what})]


_OUTPUT = OptionSpec.of(["-o", "--output"], {"--output": "-o"})


def _positionals(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-") or a == "-"]


# sort's long options (GNU: any unambiguous prefix is accepted, `--compress-prog=sh`).
_SORT = OptionSpec.of(["-o", "--output", "-k", "--key", "-t", "--field-separator", "-S", "--buffer-size", "-T",
                       "--temporary-directory", "--compress-program", "--files0-from", "--parallel", "--batch-size",
                       "--random-source", "--sort"],
                      {"--output": "-o", "--key": "-k", "--field-separator": "-t", "--buffer-size": "-S",
                       "--temporary-directory": "-T"},
                      long_flags={"--check", "--debug", "--merge", "--reverse", "--stable", "--unique", "--zero-terminated",
                                  "--ignore-leading-blanks", "--dictionary-order", "--ignore-case", "--general-numeric-sort",
                                  "--ignore-nonprinting", "--month-sort", "--human-numeric-sort", "--numeric-sort",
                                  "--random-sort", "--version-sort", "--help", "--version"})


def _sort(args: list[str]) -> tuple[str, str] | None:
    p = _SORT.parse([a if isinstance(a, Word) else Word.of(a) for a in args])
    program = p.get("--compress-program")
    if program is not None:
        # sort runs it (with `sh`-like lookup) to compress its temporary files: any program, any code.
        return ("runs", f"--compress-program={program}")
    out = p.get("-o")
    return ("write", str(out)) if out else None


def _second_positional(args: list[str]) -> tuple[str, str] | None:
    # `uniq IN OUT`, `xxd IN OUT`: the second file named is written.
    pos = _positionals(args)
    return ("write", pos[1]) if len(pos) > 1 and pos[1] != "-" else None


def _tree(args: list[str]) -> tuple[str, str] | None:
    out = _OUTPUT.parse(args).get("-o")
    return ("write", str(out)) if out else None


def _yq(args: list[str]) -> tuple[str, str] | None:
    if any(a in ("-i", "--inplace") or re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*", a) for a in args):
        files = _positionals(args)[1:]
        return ("write", files[0] if files else "")
    return None


def _rg(args: list[str]) -> tuple[str, str] | None:
    return ("runs", "--pre") if any(a == "--pre" or a.startswith("--pre=") for a in args) else None


_JOURNAL_CHANGES = ("--vacuum-size", "--vacuum-time", "--vacuum-files", "--rotate", "--flush", "--sync",
                    "--relinquish-var", "--smart-relinquish-var", "--setup-keys")


def _journalctl(args: list[str]) -> tuple[str, str] | None:
    hit = next((a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in _JOURNAL_CHANGES), None)
    return ("changes", f"journalctl {hit}") if hit else None


def _dmesg(args: list[str]) -> tuple[str, str] | None:
    hit = next((a for a in args if a in ("-C", "--clear", "-c", "--read-clear", "-D", "--console-off", "-E",
                                         "--console-on", "-n", "--console-level")
                or re.fullmatch(r"-[a-zA-Z]*[cCDEn][a-zA-Z]*", a)), None)
    return ("changes", f"dmesg {hit}") if hit else None


# GNU date's options that take a value: `date -d '10 min ago' +%s` reads a time, it does not set the clock.
_DATE = OptionSpec.of(["-d", "--date", "-r", "--reference", "-f", "--file", "-s", "--set"],
                      {"--date": "-d", "--reference": "-r", "--file": "-f", "--set": "-s"})


def _date(args: list[str]) -> tuple[str, str] | None:
    p = _DATE.parse(args)
    if "-s" in p.opts or "-s" in p.flags:
        return ("changes", "date --set")
    if any(not a.startswith("+") for a in p.positionals):
        return ("changes", "date MMDDhhmm")  # `date 010112002026` sets the clock
    return None


def _hostname(args: list[str]) -> tuple[str, str] | None:
    if _positionals(args) or any(a in ("-F", "--file", "-b", "--boot") for a in args):
        return ("changes", "hostname NAME")
    return None


_IP_CHANGES = {"add", "del", "delete", "change", "replace", "set", "flush", "append", "prepend", "up", "down",
               "save", "restore", "exec", "attach", "detach", "update"}


def _ip(args: list[str]) -> tuple[str, str] | None:
    words = [a.lower() for a in args if not a.startswith("-")]
    hit = next((w for w in words[1:3] if w in _IP_CHANGES), None)
    if hit is None and words[:1] in (["netns"],) and "exec" in words:
        hit = "exec"
    if hit == "exec":
        return ("runs", "netns exec")
    return ("changes", f"ip {' '.join(words[:2])}") if hit else None


def _timedatectl(args: list[str]) -> tuple[str, str] | None:
    verb = next((a for a in args if not a.startswith("-")), "")
    return ("changes", f"timedatectl {verb}") if verb.startswith("set-") else None


def _hash(args: list[str]) -> tuple[str, str] | None:
    # `hash -p /usr/bin/redis-cli ls`: every later `ls` runs redis-cli.
    return ("runs", "-p") if any(re.fullmatch(r"-[a-zA-Z]*p[a-zA-Z]*", a) for a in args) else None


def _sysctl(args: list[str]) -> tuple[str, str] | None:
    # `sysctl NAME`, `sysctl -a`, `-n NAME` read; -w, NAME=VALUE, -p / --load / --system (set from files) write.
    if any(a in ("-w", "--write", "-p", "--load", "-f", "--system") or a.startswith("--load=")
           or re.fullmatch(r"-[a-zA-Z]*[wpf][a-zA-Z]*", a) or (not a.startswith("-") and "=" in a) for a in args):
        return ("changes", "sysctl -w")
    return None


def _mount(args: list[str]) -> tuple[str, str] | None:
    # Only the listing: `mount`, `mount -l`. Anything else mounts, remounts or moves a file system.
    return None if all(a in ("-l", "--show-labels") for a in args) else ("changes", "mount")


def _crontab(args: list[str]) -> tuple[str, str] | None:
    # `crontab -l [-u user]` lists; a file, -e, -r install, edit or remove what cron runs later.
    if "-l" in args and not any(a in ("-e", "-r", "-i") for a in args) and \
            all(a in ("-l", "-u") or (i > 0 and args[i - 1] == "-u") for i, a in enumerate(args)):
        return None
    return ("runs", "changes the commands cron runs later")


_MKTEMP = OptionSpec.of(["-p", "--tmpdir", "--suffix"], {"--tmpdir": "-p"})


def _mktemp(args: list[str]) -> tuple[str, str] | None:
    # A new, empty, uniquely named file (or directory) under the temp directory: nothing that exists changes. One
    # under a directory the command names (`-p DIR`, `/etc/x.XXXX`) is a file written there.
    if any(a in ("-u", "--dry-run") for a in args):
        return None
    p = _MKTEMP.parse([Word.of(a) for a in args])
    template = next((str(a) for a in p.positionals), "")
    where = p.get("-p")
    if where is not None and str(where) not in ("", "/tmp") and "/" not in template:
        return ("write", f"{where}/{template or 'tmp.XXXXXXXXXX'}")
    if "/" in template and not template.startswith("/tmp/"):
        return ("write", template)
    return None


def _ifconfig(args: list[str]) -> tuple[str, str] | None:
    # `ifconfig`, `ifconfig -a`, `ifconfig eth0` show; anything after the interface (down, an address, mtu ...) sets.
    return ("changes", "ifconfig IFACE ...") if len(_positionals(args)) > 1 else None


def _man(args: list[str]) -> tuple[str, str] | None:
    # -P/--pager, -H/--html (a browser) and --preprocessor name programs man runs.
    if any(a in ("-P", "-H") or a.startswith(("--pager", "--html", "-P", "-H")) for a in args):
        return ("runs", "man -P/-H")
    return None


def _less(args: list[str]) -> tuple[str, str] | None:
    # `+CMD` runs a less command at start: `+!cmd` and `+|cmd` run a shell command, `+s`/`+o` save to a file, and so
    # does -o/-O/--log-file; -k/--lesskey-file reads key bindings that can run commands.
    for a in args:
        if a.startswith("+") and any(c in a for c in "!|") or a.startswith(("+s", "+o", "+O")):
            return ("runs", "less +CMD")
        if a.startswith(("-o", "-O", "--log-file", "--LOG-FILE", "-k", "--lesskey")):
            return ("runs", "less -o/-k")
    return None


# The staples that are not only readers with some options: what those options write, run or change.
_UNLESS = {"ifconfig": _ifconfig, "man": _man, "less": _less, "more": _less, "sort": _sort, "uniq": _second_positional, "xxd": _second_positional, "tree": _tree, "yq": _yq,
           "rg": _rg, "journalctl": _journalctl, "dmesg": _dmesg, "date": _date, "hostname": _hostname, "ip": _ip,
           "timedatectl": _timedatectl, "hash": _hash, "sysctl": _sysctl, "mount": _mount, "crontab": _crontab,
           "mktemp": _mktemp}


# Readers whose output is only numbers (digits, blanks, signs, separators; never a letter): a count, a time, a size.
# Shell arithmetic reads a letter in a value as a variable's name, and evaluates that variable's value (an array
# subscript in it runs its $(...)); a value of digits names nothing. So `n=$(... | wc -l); echo $((n + 1))` runs
# nothing but the arithmetic (`shell.ShellWalker.arithmetic`). Only the forms whose output is that whatever the input:
# wc and grep -c print file names beside the counts when they read several files (wc: any file), so only their
# stdin (or grep's one file) forms; date and stat only formats made of numeric conversions; seq without -f / -s.
_WC_FLAGS = re.compile(r"-[lcwmL]+|--(lines|bytes|words|chars|max-line-length)")
_GREP = OptionSpec.of(["-e", "--regexp", "-f", "--file", "-m", "--max-count", "-A", "-B", "-C", "--context",
                       "--after-context", "--before-context", "--include", "--exclude", "--exclude-dir",
                       "--binary-files", "-d", "--directories", "-D", "--devices", "--color", "--colour", "--label"],
                      {"--regexp": "-e", "--file": "-f", "--max-count": "-m", "--directories": "-d"})
_GREP_NAMES = frozenset({"-H", "--with-filename", "-r", "-R", "--recursive", "--dereference-recursive", "-l", "-L",
                         "--files-with-matches", "--files-without-match", "--label", "-d", "-T", "--initial-tab"})
_DATE_NUMBERS = re.compile(r"\+(%[-_0]?[0-9]*[sNYmdHMSjyuwCGgVUWekl]|[ .:,/-])+")
_STAT = OptionSpec.of(["-c", "--format"], {"--format": "-c"})
_STAT_NUMBERS = re.compile(r"(%[sYXZWihugbBoad]|[ .:,/-])+")
_NUMBER = re.compile(r"[-+]?[0-9]+(\.[0-9]+)?")
_GLOB = re.compile(r"[*?\[]")


def _wc_number(args: list[Word]) -> bool:
    return all(_WC_FLAGS.fullmatch(a) for a in args)


def _grep_number(args: list[Word]) -> bool:
    p = _GREP.parse(args)
    if not p.has("-c", "--count") or p.has(*_GREP_NAMES):
        return False
    files = p.positionals if p.has("-e", "-f") else p.positionals[1:]
    return len(files) <= 1 and not any(f.dynamic or _GLOB.search(f) for f in files)


def _date_number(args: list[Word]) -> bool:
    p = _DATE.parse(args)
    return bool(p.positionals) and len(p.positionals) == 1 and bool(_DATE_NUMBERS.fullmatch(p.positionals[0])) \
        and not p.positionals[0].dynamic and p.flags <= {"-u", "--utc", "--universal"} and set(p.opts) <= {"-d", "-r"}


def _stat_number(args: list[Word]) -> bool:
    p = _STAT.parse(args)
    fmt = p.get("-c")
    return fmt is not None and not getattr(fmt, "dynamic", False) and bool(_STAT_NUMBERS.fullmatch(str(fmt))) \
        and p.flags <= {"-L", "--dereference"} and set(p.opts) == {"-c"}


def _seq_number(args: list[Word]) -> bool:
    return all(a in ("-w", "--equal-width") or (not a.dynamic and _NUMBER.fullmatch(a)) for a in args)


def _filter_options(args: list[Word]) -> bool:
    # `head -n 1`, `tail -1`, `sort -rn`, `sort -k 1,1`: options and their numeric values, no file.
    return all(a.startswith("-") or re.fullmatch(r"[0-9,.]+", a) for a in args)


def _tr_delete(args: list[Word]) -> bool:
    # `tr -d ' '`, `tr -s ' '`: characters deleted or squeezed, none put in (tr a-z A-Z would translate digits too).
    return len(args) == 2 and args[0] in ("-d", "-s", "-ds", "--delete", "--squeeze-repeats")


# Readers that pass numbers on as numbers (`... | wc -l | tr -d ' '`).
_KEEPS_NUMBERS = {"cat": lambda args: not args, "head": _filter_options, "tail": _filter_options,
                  "sort": _filter_options, "tr": _tr_delete}

_NUMBERS = {"wc": _wc_number, "grep": _grep_number, "egrep": _grep_number, "fgrep": _grep_number,
            "date": _date_number, "stat": _stat_number, "seq": _seq_number}


# awk runs commands with system(), `cmd | getline`, `print | "cmd"`; it writes with `print > "file"`.
_AWK_RUNS = re.compile(r"\bsystem\s*\(|\|\s*getline|\|&|\bprint[f]?\b[^;{}]*\||@[A-Za-z_]\w*\s*\(")
_AWK_WRITES = re.compile(r"\bprint[f]?\b[^;{}]*?>>?\s*(\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_]*)")


@register
class Awk:
    """awk and its variants."""

    commands = ("awk", "gawk", "mawk", "nawk")

    def classify(self, inv: Invocation) -> list[Action]:
        p = OptionSpec.of(["-F", "-v", "-f", "--file", "-i", "--include", "-l", "--load", "-E", "--exec"],
                          {"--file": "-f", "--include": "-i", "--exec": "-E"}).parse(inv.args)
        if p.get("-f") is not None or p.get("-E") is not None:
            return [inv.opaque("script-file", "the awk program is in a file that is not visible", tool="awk")]
        if p.get("-l") is not None or p.get("--load") is not None:
            # gawk -l filefuncs '...unlink(...)': an extension adds functions that change files.
            return [inv.opaque("awk extension", "gawk loads an extension whose functions the guard does not "
                               "know", tool="awk")]
        program = str(p.positionals[0]) if p.positionals else ""
        if p.get("-i") is not None and str(p.get("-i")) == "inplace":
            return [file_write(inv, str(f), verb="edit", by="awk -i inplace") for f in p.positionals[1:]]
        if _AWK_RUNS.search(program):
            return [inv.opaque("awk system", "the awk program runs shell commands", tool="awk", program=program)]
        out = [inv.action("awk", "read", mutating=False, details={"program": program})]
        for m in _AWK_WRITES.finditer(program):
            dest = m.group(1)
            if dest.startswith('"'):
                out.append(file_write(inv, dest.strip('"'), by="awk print >"))
            else:
                out.append(inv.action("file", "write", mutating=UNKNOWN, opaque_reason="awk writes to a computed path"))
        return out


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 1}


def parse_duration(text: str) -> float | None:
    """`5` -> 5.0, `2m` -> 120.0, `0.5s` -> 0.5; None when not a duration."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", text)
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


@register
class Sleep:
    """sleep N: waiting, which is how an agent lets a system converge."""

    commands = ("sleep",)

    def classify(self, inv: Invocation) -> list[Action]:
        total = 0.0
        for a in inv.args:
            d = None if a.dynamic else parse_duration(str(a))
            if d is None:
                return [inv.action("sleep", "sleep", mutating=False, details={"seconds": None, "arg": str(a)})]
            total += d
        seconds: float | int = int(total) if total == int(total) else total
        return [inv.action("sleep", "sleep", mutating=False, details={"seconds": seconds})]


@register
class Kill:
    """kill, pkill, killall: signals to processes."""

    commands = ("kill", "pkill", "killall")

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        if inv.name == "kill" and (not args or args[0] in ("-l", "-L", "--list")) and not inv.args_pending:
            return [inv.action("shell", "kill -l", mutating=False)]
        # In a pod every server program is what the kubelet restarts; on the agent's own machine only a datastore's
        # server counts: `pkill node` there ends the agent's own tools.
        programs = SERVER_PROGRAMS if inv.where.in_exec else DATASTORE_SERVERS
        if inv.name == "kill":
            sig, targets = kill_args(args)
            dynamic = {str(a) for a in inv.args if a.dynamic}
            if inv.args_pending:  # `pgrep postgres | xargs kill`: the pids arrive on xargs' input as it runs
                lookup = inv.pending_from
                # From a lookup by name the pids are that program's, as `kill $(pgrep postgres)` gives them.
                pending = f"$({lookup})" if _PID_LOOKUP.match(f"$({lookup})") else _XARGS_PIDS
                targets = [*targets, pending]
                dynamic.add(pending)
            details: dict = {"signal": "-" + sig, "targets": targets}
            reach = [_kill_reach(t, t in dynamic, programs) for t in targets]
            # A signal a server handles ends nothing: HUP for any, USR1/USR2 for the servers that handle them
            # (a pid, or a pid looked up by name, whose program is one of those).
            reach = [r for r, t in zip(reach, targets) if not leaves_running(sig, _looked_up(t))]
            # In a pod any of them may be its main process; here (the host, or the container the agent runs in)
            # only PID 1, -1 and a server's pid looked up by name are known to be.
            ends_main = any(r is not None for r in reach) if inv.where.in_exec else \
                any(r not in (None, _UNSURE) for r in reach)
            server = next((r for r in reach if r not in (None, _UNSURE, "")), "")
        else:
            targets = _named_targets(inv.name, args)
            details = {"signal": next((a for a in args if a.startswith("-")), "-TERM"), "targets": targets}
            # The container's server process by name: when it exits, the kubelet restarts the container.
            sigs = _signals(args)
            ends_main = _kills_server(inv.name, args, sigs, targets, programs)
            server = next((n for t in targets
                           if (n := _server_named(t, pattern=inv.name == "pkill", programs=programs))), "")
            # A postgres child (`pkill -9 -f 'postgres: '`) that dies of a crash signal: the postmaster ends every
            # backend and runs crash recovery, a restart of the database.
            if not ends_main and inv.name == "pkill" and sigs & _CRASH_SIGNALS \
                    and any(_PG_CHILD.match(t) for t in targets):
                ends_main, server = True, "postgres"
            # Every process of a user (`pkill -u postgres`, no name): in a pod its server may be one of them; on
            # the agent's own machine, a datastore's own user runs that datastore.
            users = _option_values(args, _USER_OPTIONS[inv.name])
            if not ends_main and users and not targets and not any(leaves_running(sig, None) for sig in sigs):
                owned = next((_USER_SERVERS[u] for u in users if u in _USER_SERVERS), "")
                if inv.where.in_exec or owned:
                    ends_main, server = True, owned
                    details["users"] = users
        if not ends_main:
            return [inv.action("shell", inv.name, mutating=True, details=details)]
        details["restart"] = True
        if inv.where.in_exec:
            return [inv.action("shell", inv.name, mutating=True, details=details, target=inv.pod_target)]
        # On the agent's own machine (`guardrail shell --env local`, or inside the container it runs in): a stop of
        # the server program named, or of PID 1 (the container's main process), which is a restart of what runs it.
        if server:
            return [inv.action("shell", inv.name, mutating=True, details=details,
                               target=Target(kind="component", name=server, namespace=inv.where.namespace))]
        details["selector"] = "PID 1, its process group or every process"
        return [inv.action("shell", inv.name, mutating=True, details=details,
                           target=Target(kind="process", name="", namespace=inv.where.namespace))]


# Signals that leave a process running: HUP asks most servers to reload their config, 0 only checks it exists.
_NO_RESTART_SIGNALS = frozenset({"HUP", "1", "0", "CONT", "18", "WINCH", "28"})
# USR1/USR2 end a process that does not handle them (redis-server dies of SIGUSR1); these servers handle them
# (reopen logs, re-exec, internal notices). pgbouncer's USR1 is PAUSE: not harmless either.
_USR_SIGNALS = frozenset({"USR1", "USR2", "10", "12"})
_HANDLES_USR = frozenset({"nginx", "postgres", "postmaster", "gunicorn", "uwsgi", "haproxy", "envoy"})


def leaves_running(sig: str, program: str | None) -> bool:
    """Does signal `sig` (upper case, without SIG) leave `program` (None: not known) running?"""
    return sig in _NO_RESTART_SIGNALS or (sig in _USR_SIGNALS and program in _HANDLES_USR)


# Server programs that are a container's main process (its PID 1, or what PID 1 waits on).
SERVER_PROGRAMS = ("postgres", "postmaster", "pgbouncer", "redis-server", "redis-sentinel", "mysqld", "mariadbd",
                   "mysqld_safe", "nginx", "haproxy", "envoy", "gunicorn", "uwsgi", "uvicorn", "memcached", "mongod",
                   "rabbitmq-server", "beam.smp", "java", "node")


# The datastores' servers: on the agent's own machine, where an app runtime (node, java, gunicorn) is as likely the
# agent's own tool as a server of the incident, only these are taken as a server the kill restarts.
DATASTORE_SERVERS = ("postgres", "postmaster", "pgbouncer", "redis-server", "redis-sentinel", "mysqld", "mariadbd",
                     "mysqld_safe", "memcached", "mongod", "rabbitmq-server")

# pkill/killall options that take the next word as their value (a user, a group, a session, a pid file ...), not a
# process name.
_VALUE_OPTIONS = {"pkill": {"-u", "-U", "-g", "-G", "-s", "-t", "-F", "-P", "-c", "--ns", "--nslist", "--signal",
                            "--euid", "--uid", "--group", "--pgroup", "--session", "--terminal", "--pidfile",
                            "--parent", "--cgroup"},
                  "killall": {"-u", "-o", "-y", "-s", "-n", "-Z", "--user", "--older-than", "--younger-than",
                              "--signal", "--ns", "--context"}}


def _named_targets(name: str, args: list[str]) -> list[str]:
    """The process names (patterns) a pkill/killall names, without its options and their values."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in _VALUE_OPTIONS.get(name, ()):
            skip = True
        elif not a.startswith("-"):
            out.append(a)
    return out


# `$(pgrep -f redis-server)`, `` `pidof mysqld` ``: the pids of processes looked up by name as the kill runs.
_PID_LOOKUP = re.compile(r"^(?:\$\(|`)\s*(pgrep|pidof)\s+([^()`;&|]*?)\s*(?:\)|`)$")


def _looked_up(target: str) -> str | None:
    """The program a `$(pgrep NAME)` / `$(pidof NAME)` target names, or None."""
    m = _PID_LOOKUP.match(target)
    if m is None:
        return None
    words = [w for w in m.group(2).split() if not w.startswith("-")]
    return words[0].rsplit("/", 1)[-1] if words else None


_UNSURE = "?"
# The target of a `kill` whose pids xargs reads from its input as it runs.
_XARGS_PIDS = "<pids read by xargs>"


def _kill_reach(target: str, dynamic: bool, programs: tuple[str, ...] = SERVER_PROGRAMS) -> str | None:
    """What a `kill` target may end of a container's main process: None (not it), "" (PID 1, or -1: every process
    the signal can reach, the server under an init such as tini or the postmaster's backends), a server program's
    name (its pid looked up as the kill runs: `$(pgrep postgres)`, `` `pidof mysqld` ``), or _UNSURE (any other pid
    computed as the command runs, `$p`, `` `cat /run/mysqld/mysqld.pid` ``: in a pod it may be the server's)."""
    if not dynamic:
        # 1 and -1; and 0, every process of the kill's own process group (in a pod that may be PID 1's).
        return "" if target.lstrip("-").isdigit() and int(target.lstrip("-")) in (0, 1) else None
    m = _PID_LOOKUP.match(target)
    if m is None:
        return _UNSURE
    try:
        words = shlex.split(m.group(2))
    except ValueError:
        return _UNSURE
    names = _named_targets("pkill", words) if m.group(1) == "pgrep" else [w for w in words if not w.startswith("-")]
    if not names:
        return _UNSURE
    return next((s for n in names if (s := _server_named(n, pattern=m.group(1) == "pgrep", programs=programs))),
                None)


def _signals(args: list[str]) -> set[str]:
    """The signals a pkill/killall names (`-9`, `-KILL`, `--signal=KILL`, `--signal KILL`, `-s KILL`), upper-case
    without SIG, with the option words themselves (harmless: they name no signal)."""
    sigs = {a.lstrip("-").upper().removeprefix("SIGNAL=").removeprefix("SIG") for a in args if a.startswith("-")}
    # `--signal NAME` (pkill) and `-s NAME` (killall) as two words: the word after names the signal.
    return sigs | {args[i + 1].upper().removeprefix("SIG") for i, a in enumerate(args[:-1]) if a in ("--signal", "-s")}


def _option_values(args: list[str], options: frozenset[str]) -> list[str]:
    """The values of these options (`-u postgres`, `-upostgres`, `--uid=postgres`), comma lists split."""
    out: list[str] = []
    for i, a in enumerate(args):
        if a in options and i + 1 < len(args):
            out += args[i + 1].split(",")
        elif "=" in a and a.split("=", 1)[0] in options:
            out += a.split("=", 1)[1].split(",")
        elif a[:2] in options and len(a) > 2 and not a.startswith("--"):
            out += a[2:].split(",")
    return [u for u in out if u]


# A postgres child's process title (`postgres: autovacuum launcher`, `postgres: saleor saleor [local] idle`).
_PG_CHILD = re.compile(r"^(\S*/)?postgres:")
# Signals of which a child ends abnormally: the postmaster then ends every backend and runs crash recovery.
_CRASH_SIGNALS = frozenset({"KILL", "9", "QUIT", "3", "SEGV", "11", "ABRT", "6", "BUS", "7", "ILL", "4", "FPE", "8"})
_USER_OPTIONS = {"pkill": frozenset({"-u", "-U", "--euid", "--uid"}), "killall": frozenset({"-u", "--user"})}
# The users the datastores' images run their servers as.
_USER_SERVERS = {"postgres": "postgres", "mysql": "mysqld", "redis": "redis-server", "pgbouncer": "pgbouncer",
                 "memcache": "memcached", "mongodb": "mongod", "rabbitmq": "rabbitmq-server"}


def _kills_server(name: str, args: list[str], sigs: set[str], targets: list[str],
                  programs: tuple[str, ...] = SERVER_PROGRAMS) -> bool:
    """pkill/killall of a server program by name, with a signal (`sigs`: _signals(args)) that ends it (not HUP,
    USR1/2, 0, CONT)."""
    if any(leaves_running(sig, next((n for t in targets if (n := _server_named(t, pattern=name == "pkill",
                                                                              programs=programs))), None))
           for sig in sigs):
        return False
    # pkill -P 1: every child of PID 1 (the postmaster's backends and workers; a shell PID 1's server).
    if name == "pkill" and any(a == "-P" and args[i + 1].split(",").count("1") for i, a in enumerate(args[:-1])):
        return True
    return any(_server_named(t, pattern=name == "pkill", programs=programs) for t in targets)


def _server_named(target: str, *, pattern: bool, programs: tuple[str, ...] = SERVER_PROGRAMS) -> str | None:
    """The server program a process name (or pattern) reaches, or None. killall matches a program's name exactly;
    pkill (and pgrep) take a regular expression that may match any part of it (`pkill redis` ends redis-server), or
    of its command line with -f (`pkill -f 'postgres -D /var/lib/postgresql/data'`: postgres)."""
    base = target.rsplit("/", 1)[-1]
    if base in programs:
        return base
    if not pattern:
        return None
    # A command-line pattern that starts with the server's own name and its arguments ('redis-server *:6379'); not
    # a worker's title ('postgres: autovacuum launcher'), which names a child process.
    for p in programs:
        if re.match(rf"^(\S*/)?{re.escape(p)}(\s|$)", target):
            return p
    try:
        rx = re.compile(target)
    except re.error:
        return next((p for p in programs if target in p), None)
    return next((p for p in programs if rx.search(p)), None)


def kill_args(args: list[str]) -> tuple[str, list[str]]:
    """`kill` as bash reads it: the signal (`-9`, `-KILL`, `-SIGKILL`, `-s KILL`, `-n 9`, `--signal=KILL`; TERM
    by default), upper-case without SIG, and the targets (after the signal, `-1` is a target: every process)."""
    sig, targets, seen_sig, i = None, [], False, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            targets += args[i + 1:]
            break
        if not seen_sig and not targets and a in ("-s", "-n", "--signal") and i + 1 < len(args):
            sig, seen_sig, i = args[i + 1], True, i + 2
            continue
        if not seen_sig and not targets and a.startswith("--signal="):
            sig, seen_sig = a.partition("=")[2], True
        elif not seen_sig and not targets and a.startswith("-") and len(a) > 1:
            sig, seen_sig = a[1:], True
        else:
            targets.append(a)
        i += 1
    sig = (sig or "TERM").upper()
    return (sig[3:] if sig.startswith("SIG") else sig), targets


_PROBE_FLAGS = frozenset("zvnwu460123456789")


@register
class Netcat:
    """nc -z: a port check, which sends nothing. Any other nc sends what its input holds (`echo FLUSHALL | nc
    redis 6379`) or serves a port: opaque."""

    commands = ("nc", "ncat", "netcat")

    def classify(self, inv: Invocation) -> list[Action]:
        flags = [str(a)[1:] for a in inv.args if str(a).startswith("-")]
        # Only -z with the options of a probe (verbose, numeric, timeout, UDP, address family): not -e/-c/--exec,
        # which run a program on the connection.
        if (not any(a.dynamic for a in inv.args) and inv.stdin is None and any("z" in f for f in flags)
                and all(set(f) <= _PROBE_FLAGS for f in flags)):
            return [inv.action(inv.name, "port-check", mutating=False)]
        return [inv.opaque(inv.name, f"{inv.name} sends what its input holds to a server, or listens on a port; "
                                     "use the server's own client (redis-cli, psql, curl), or nc -z for a port check")]


_UNIT_READS = frozenset({"status", "show", "is-active", "is-enabled", "is-failed", "list-units", "list-unit-files",
                         "cat", "list-timers", "list-sockets", "list-dependencies", "help", "--version"})


@register
class ServiceManager:
    """systemctl and service: a restart or stop of a unit is a restart of that component."""

    commands = ("systemctl", "service")

    def classify(self, inv: Invocation) -> list[Action]:
        words = [str(a) for a in inv.args if not str(a).startswith("-")]
        if inv.name == "service":
            unit, verb = (words[0], words[1]) if len(words) > 1 else ("", words[0] if words else "status")
        else:
            verb, unit = (words[0], words[1]) if len(words) > 1 else (words[0] if words else "list-units", "")
        target = Target(kind="component", name=unit.removesuffix(".service"), namespace=inv.where.namespace)
        if verb in _UNIT_READS:
            return [inv.action(inv.name, verb, target=target, mutating=False)]
        if inv.name == "systemctl" and verb in _HOST_STATES:
            # The machine's own state: powered off, rebooted, or every unit but a rescue shell stopped.
            return [inv.action(inv.name, f"systemctl {verb}", target=target, mutating=True,
                               details={"host_change": f"systemctl {verb}"})]
        now = any(str(a) == "--now" for a in inv.args)
        stops = verb in ("restart", "stop", "kill", "try-restart", "reload-or-restart") or \
            (now and verb in ("disable", "mask"))  # `disable --now`: stopped, and not started again at boot
        details = {"restart": True} if stops else {}
        return [inv.action(inv.name, verb, target=target, mutating=True, details=details)]


_HOST_STATES = frozenset({"isolate", "poweroff", "reboot", "halt", "kexec", "rescue", "emergency", "suspend",
                          "hibernate", "hybrid-sleep", "soft-reboot", "default", "exit", "switch-root"})
