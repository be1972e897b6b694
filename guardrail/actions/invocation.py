"""One simple command as the classifiers see it: its argv, what arrives on its stdin, and where it runs.

Built by `guardrail.actions.shell` (the walker) and by the wrappers (`sh -c`, `kubectl exec`, `xargs` ...);
read by every classifier in `guardrail.actions.classifiers`. Pure data plus the helpers that turn a host or a
path into a `Target` the same way for every tool.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Mutating, Target
from guardrail.actions.words import Word

__all__ = ["Stdin", "Where", "Invocation", "component_of_host", "LOCAL_HOSTS", "STDIN_PATHS", "SYSTEM_BIN_DIRS",
           "clean_path", "host_part", "NULL_DEVICE", "body_on_stdin"]

LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"})
# File names under which a tool reads its stdin (`kubectl apply -f /dev/stdin` is `-f -`). The shell shim keeps
# the same set (guardrail/adapters/shell/shim.py, standard library only); a test holds them equal.
STDIN_PATHS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
# Read as a file, it is empty: `tool < /dev/null`, a session whose commands run with no stdin (Guard.execute).
NULL_DEVICE = "/dev/null"
# The largest file a classifier reads at decision time (a manifest, a values file): larger is not judged.
MAX_READ_AT_DECISION = 1024 * 1024


class Unreadable(Exception):
    """A file a command names that the guard cannot read at decision time; its message says why."""


def stdin_at_decision(stdin: "Stdin | None", where: "Where") -> str:
    """What a command will read on stdin, known now: the heredoc's (or piped echo's) text, or a file redirected in
    (`< deploy.yaml`) read now (read_at_decision); Unreadable otherwise (another program's output, no stdin)."""
    if stdin is None:
        raise Unreadable("there is no stdin to read")
    if stdin.text is not None and not stdin.decoded:
        return stdin.text
    if stdin.source == "file" and stdin.producer == NULL_DEVICE:
        return ""
    if stdin.source == "file" and stdin.producer and not stdin.decoded:
        return read_at_decision(stdin.producer, where if stdin.in_pod else Where())
    raise Unreadable(f"stdin comes from {stdin.producer or stdin.source}")


def body_on_stdin(inv: "Invocation") -> tuple[str | None, str | None]:
    """(the text a tool that takes its body on stdin reads, why it is not known). Every channel comes to the same
    text: a heredoc, a here-string, echo/printf/cat through a pipe, a file redirected in (read now, bounded), the
    payload a shim or daemon forwards (as a heredoc), `< /dev/null` or a session run with no stdin (empty). A
    stdin the guard cannot see (another program's output, a terminal, a caller's it was not given) is not an
    empty body: the caller judges the write opaque."""
    try:
        return stdin_at_decision(inv.stdin, inv.where), None
    except Unreadable as e:
        return None, str(e)


def read_at_decision(path: str, where: "Where") -> str:
    """The text of a file a command will read (`kubectl apply -f FILE`, `helm -f FILE`), read now so that it is
    judged as a heredoc holding it would be; Unreadable when it cannot be: fetched as the command runs (a URL),
    inside a container, missing, not a regular file, over MAX_READ_AT_DECISION or not UTF-8 text. (It is read
    again when the command runs: a file changed in between is the same race as any check before a use.)"""
    from verifiers.datafile import DataFileError, read_input_bytes

    if "://" in path:
        raise Unreadable(f"{path} is fetched when the command runs")
    if where.in_exec:
        raise Unreadable(f"{path} is in the container")
    try:
        raw = read_input_bytes(path, limit=MAX_READ_AT_DECISION)
    except DataFileError as e:
        raise Unreadable(f"{path}: {e.message}") from e
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"{path} is not UTF-8 text") from e


@dataclass(frozen=True)
class Stdin:
    """What a command reads on stdin: known text (heredoc, here-string, echo through a pipe) or not."""

    source: str  # heredoc | herestring | pipe | file
    text: str | None = None  # None when the content is only known at run time
    computed: bool = False  # a program upstream computed it (curl, a decoder ...): not the text as typed
    decoded: bool = False  # a decoder (base64 -d, xxd -r, rev, openssl ...) is upstream
    producer: str = ""  # the command (or file) it comes from
    number: bool = False  # only numbers (a count, a time, a size: no letter), whatever the input (`wc -l`)
    # A file opened (by `<` or cat) inside a container (`kubectl exec pod -- sh -c 'x < f'`), not on the host where
    # the guard runs; a host-side `< f` before `kubectl exec -i` is read here, where the shell opens it.
    in_pod: bool = False


@dataclass(frozen=True)
class Where:
    """Where a command runs: the wrapper chain, and the pod when it is inside `kubectl exec`."""

    via: tuple[str, ...] = ()
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    depth: int = 0

    @property
    def in_exec(self) -> bool:
        return self.pod is not None

    def inside(self, label: str, **changes: Any) -> "Where":
        return dataclasses.replace(self, via=self.via + (label,), depth=self.depth + 1, **changes)


_SVC_DNS = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.svc(\.cluster\.local)?)?\.?$")


def component_of_host(host: str) -> tuple[str, str | None]:
    """`svc-channel.slack.svc.cluster.local` -> ("svc-channel", "slack"); `svc-channel` -> ("svc-channel", None)."""
    h = host.strip().lower()
    m = _SVC_DNS.match(h)
    if m and m.group(5):
        return m.group(1), m.group(3)
    return h, None


# part_raw keeps the invocation's own text when it is at most this much longer than the part (its options).
_PART_SLACK = 512


@dataclass
class Invocation:
    """One simple command to classify."""

    argv: list[Word]
    where: Where = field(default_factory=Where)
    stdin: Stdin | None = None
    raw: str = ""
    # xargs appends words read from stdin at run time: the argv seen here may be incomplete.
    args_pending: bool = False
    # ... and the command whose output they are, when known (`pgrep postgres` in `pgrep postgres | xargs kill`).
    pending_from: str = ""
    # The words as typed, without the redirections (an alias expands into these; its stdin is `stdin`).
    words_raw: str | None = None

    @property
    def name(self) -> str:
        return command_name(self.argv[0]) if self.argv else ""

    @property
    def args(self) -> list[Word]:
        return self.argv[1:]

    # ---- helpers every classifier shares ------------------------------------------------------------------

    def action(self, tool: str, verb: str, *, target: Target | None = None, keys: list[KeyChange] | None = None,
               layer: Layer = Layer.NONE, mutating: Mutating = UNKNOWN, opaque_reason: str | None = None,
               details: dict[str, Any] | None = None) -> Action:
        return Action(tool=tool, verb=verb, target=target or Target(namespace=self.where.namespace),
                      keys=keys or [], layer=layer, mutating=mutating, raw=self.raw,
                      words=[str(w) for w in self.argv], via=list(self.where.via),
                      opaque_reason=opaque_reason, details=self._with_pod(details or {}))

    def _with_pod(self, details: dict[str, Any]) -> dict[str, Any]:
        if self.where.in_exec:
            details.setdefault("pod", self.where.pod)
            if self.where.container:
                details.setdefault("container", self.where.container)
        return details

    @property
    def pod_target(self) -> Target:
        """The pod this command runs in (inside `kubectl exec`)."""
        return Target(kind="pod", name=self.where.pod or "", namespace=self.where.namespace)

    def service_target(self, host: str | None, default: str) -> Target:
        """The component a client talks to: the named host, else the pod it runs in, else `default`."""
        if host and host.lower() not in LOCAL_HOSTS:
            comp, ns = component_of_host(host)
            return Target(kind="component", name=comp, namespace=ns or self.where.namespace)
        if self.where.in_exec:
            return self.pod_target
        return Target(kind="component", name=default, namespace=self.where.namespace)

    def file_target(self, path: str) -> Target:
        if self.where.in_exec:
            return self.pod_target
        return Target(kind="file", name=path)

    @property
    def file_layer(self) -> Layer:
        # Inside a container a file edit lands in its writable layer, which a restart discards.
        return Layer.RUNTIME if self.where.in_exec else Layer.DECLARED

    def part_raw(self, part: str, others: set[str] = frozenset()) -> str:
        """This invocation's text with `part` in place of the whole of what it is part of: its words less those
        that are `others` (the parts of its other actions: the other files of one `rm`), each word that holds
        more than the part (all the SQL of `-c`) replaced by the part, or the part fed as stdin when no word
        holds it (a heredoc). See own_raw."""
        words = [str(w) for w in self.argv]
        kept = [w for w in words if w == part or w not in others]
        if part in kept:
            return " ".join(shlex.quote(w) for w in kept)
        if any(part in w for w in kept):
            return " ".join(shlex.quote(part) if part in w else shlex.quote(w) for w in kept)
        return " ".join(shlex.quote(w) for w in kept) + " <<< " + shlex.quote(part)

    def own_raw(self, actions: list[Action]) -> list[Action]:
        """`actions`, all of this invocation, each with a raw of its own part (part_raw) when there are several:
        an invocation that splits into N actions (2,000 statements of one `psql -c`, 1,000 files of one `rm`,
        URLs of one `curl`, lines of a heredoc into `redis-cli`) gave each the whole text, and N copies of it
        made the decision input and the journal grow as N squared. An action's part is the first of its SQL
        statement, its command line, URL, path or target name that the text holds."""
        if len(actions) < 2 or len(self.raw) <= _PART_SLACK:
            return actions
        parts: list[str | None] = []
        for a in actions:
            det = a.details if isinstance(a.details, dict) else {}
            found = None
            if a.raw == self.raw:
                for p in (det.get("statement"), det.get("command"), det.get("url"), det.get("path"), a.target.name):
                    if isinstance(p, str) and p.strip() and p.strip() in self.raw:
                        found = p.strip()
                        break
            parts.append(found)
        named = {p for p in parts if p is not None}
        for a, part in zip(actions, parts):
            if part is not None:
                a.raw = self.part_raw(part, named - {part})
                a.words = self.part_words(part, named - {part})
        return actions

    def part_words(self, part: str, others: set[str] = frozenset()) -> list[str]:
        """The words of part_raw, unquoted: the invocation's words less the other parts, the part in place of a
        word that holds more, or after them when no word holds it."""
        kept = [w for w in (str(x) for x in self.argv) if w == part or w not in others]
        if part in kept:
            return kept
        if any(part in w for w in kept):
            return [part if part in w else w for w in kept]
        return [*kept, part]

    def opaque(self, verb: str, reason: str, *, tool: str = "shell", **details: Any) -> Action:
        return self.action(tool, verb, mutating=UNKNOWN, opaque_reason=reason, details=details)


def command_name(word: str) -> str:
    """`/usr/bin/redis-cli` -> `redis-cli`; `./restart-svc.sh` -> `restart-svc.sh`."""
    return word.rstrip("/").rsplit("/", 1)[-1] if "/" in word else word


# Variables whose value the shell, the dynamic loader or a program runs, or that decide which program runs: set on a
# command (`PATH=/tmp ls`, `LD_PRELOAD=x.so cmd`, `PS4='$(...)' bash -x`, `LESSOPEN='|cmd %s' less`), they make
# what runs something other than what the command line says.
RUNS_CODE_VARS = frozenset({
    "PATH", "BASH_ENV", "ENV", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "IFS",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
    "KUBECTL_EXTERNAL_DIFF", "KUBE_EDITOR", "EDITOR", "VISUAL", "PAGER", "LESSOPEN", "LESSCLOSE", "PSQL_PAGER",
    "MANPAGER", "SYSTEMD_PAGER",
    "PSQL_EDITOR", "MYSQL_PS1", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "RSYNC_RSH",
    "RSYNC_CONNECT_PROG", "PSQLRC", "MYSQL_HOME", "LIBMYSQL_PLUGINS", "LIBMYSQL_PLUGIN_DIR",
    "PYTHONSTARTUP", "PYTHONPATH", "PERL5OPT", "PERL5LIB", "NODE_OPTIONS", "RUBYOPT",
})


# Where a system's own programs live: a reader named by a path elsewhere is not taken for the system's, and a file
# written there replaces a program every later command names.
SYSTEM_BIN_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin")
# A PATH made of these (and the PATH it had) finds only the system's own programs.
_SYSTEM_PATH_PARTS = frozenset({"$PATH", "${PATH}", *SYSTEM_BIN_DIRS})


def clean_path(path: str) -> str:
    """A path as the kernel reads it, lexically: `//usr/./bin/` is /usr/bin; a process's view of its root
    (`/proc/1/root/var/lib/mysql`, `/proc/self/root/...`) is the path under it. Relative paths stay relative."""
    if not path or "/" not in path:
        return path
    p = posixpath.normpath(path)
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    m = _PROC_ROOT.match(p)
    return (m.group(1) or "/") if m else p


_PROC_ROOT = re.compile(r"^/proc/(?:\d+|self|thread-self)/root(/.*)?$")
# Files whose change is one to the whole machine (or the whole container): the kernel's settings and triggers,
# how names resolve, which libraries every program loads. A process's stdin/stdout/stderr under /proc is not.
_HOST_FILES = (
    (re.compile(r"^/proc/(?:\d+|self|thread-self)/fd/[012]$"), ""),
    (re.compile(r"^/(proc|sys)(/|$)"), "the kernel's state"),
    (re.compile(r"^/etc/(hosts|resolv\.conf|nsswitch\.conf|host\.conf|gai\.conf)$"), "how names resolve"),
    (re.compile(r"^/etc/ld\.so\.(preload|conf)(\.d(/|$)|$)"), "the libraries every program loads"),
    (re.compile(r"^/var/lib/(etcd|kubelet|docker|containerd|containers)(/|$)"),
     "the node's cluster state or container runtime"),
)


def host_part(path: str) -> str:
    """What of the host a file write at `path` changes ("" when nothing of the host's own): a system program
    (a file in, or the whole of, a bin directory), the kernel's state (/proc, /sys), name resolution (/etc/hosts,
    /etc/resolv.conf), the loader's preloads (/etc/ld.so.preload), etcd's, the kubelet's and the container
    runtime's state (/var/lib/etcd, /var/lib/kubelet, /var/lib/docker ...)."""
    if not path.startswith("/"):
        return ""
    if path in SYSTEM_BIN_DIRS or posixpath.dirname(path) in SYSTEM_BIN_DIRS:
        return "the system's programs"
    return next((what for rx, what in _HOST_FILES if rx.match(path)), "")


def runs_code(name: str, value: str | None = None) -> bool:
    """Does setting `name` (to `value`, when known) change which program runs or what it runs?"""
    if name == "PATH" and value is not None and value and all(p in _SYSTEM_PATH_PARTS for p in value.split(":")):
        return False  # `export PATH=$PATH:/usr/sbin`
    if name in PAGER_VARS and value is not None and _PLAIN_PAGER.fullmatch(value):
        return False  # `PAGER=cat psql ...`, `PSQL_PAGER= psql`: output straight through, or into less
    if name in SQL_LEXING_VARS:
        return not _plain_libpq_env(name, value)
    return name in RUNS_CODE_VARS


# libpq's variables that change how the server and psql read SQL text: PGOPTIONS passes server settings to the
# session (`-c standard_conforming_strings=off` makes a backslash escape a quote), PGCLIENTENCODING may name an
# encoding whose characters hold the bytes of `\` and `'` (SJIS, BIG5, GBK). The guard reads SQL as the defaults have
# it, so only values that keep them count as plain.
SQL_LEXING_VARS = frozenset({"PGOPTIONS", "PGCLIENTENCODING"})
_LEXING_SETTING = re.compile(r"standard[_-]conforming[_-]strings|client[_-]encoding", re.I)
_PLAIN_OPTION = re.compile(r"(?:-c\s*|--)([A-Za-z_][A-Za-z0-9_.-]*)=(\S*)")


def _plain_libpq_env(name: str, value: str | None) -> bool:
    if value is None:
        return False
    if name == "PGCLIENTENCODING":
        return value.strip().lower().replace("-", "").replace("_", "") in ("", "utf8", "unicode", "sqlascii")
    parts = value.split()
    i, ok = 0, True
    while i < len(parts):  # `-c name=value`, `-cname=value`, `--name=value`
        word = parts[i] + (" " + parts[i + 1] if parts[i] == "-c" and i + 1 < len(parts) else "")
        m = _PLAIN_OPTION.fullmatch(word)
        if m is None or _LEXING_SETTING.fullmatch(m.group(1)) and m.group(2).strip("'\"").lower() not in ("on", "true",
                                                                                                           "1"):
            ok = False
        i += 2 if parts[i] == "-c" else 1
    return ok


# Variables naming the pager a program pipes its output into (the shell runs the value as a command line).
PAGER_VARS = frozenset({"PAGER", "PSQL_PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER"})
# A pager that only shows what it is given: none (empty), cat, or less/more with flags that take no value (less's
# -k (a key file, which can set LESSOPEN), -o/-O (a log file it writes), -p/-P/-t/-T ... take one).
_PLAIN_PAGER = re.compile(r"|cat|(less|more)(\s+-[FRSXKMNQWacdefilmnqrsuw]+)*")
