"""Diagnostics that read in one mode and write in another: compressed logs, archives, git, TLS checks, schema dumps.

Unknown commands are opaque (denied by default), and these were among the commonest false denials an operator
meets (`zcat app.log.2.gz`, `tar tzf backup.tgz`, `git log`, `pg_dump --schema-only`). Each is read-only only in
the modes that leave every file as it was and print to stdout; any other mode stays opaque, or is the file write
it is. Registered by command name; called by `Normaliser.dispatch`.
"""

from __future__ import annotations

import re

from guardrail.actions.classifiers.base import register
from guardrail.actions.invocation import Invocation
from guardrail.actions.model import Action
from guardrail.actions.shell import file_write

__all__ = ["Decompressors", "Tar", "Git", "Openssl", "SchemaDump"]


def _flags(args: list[str]) -> set[str]:
    """Single-letter flags of short options (`-dc` -> {d, c}) and the long options as given."""
    out: set[str] = set()
    for a in args:
        if a.startswith("--"):
            out.add(a.split("=", 1)[0])
        elif a.startswith("-") and len(a) > 1:
            out.update(a[1:])
    return out


@register
class Decompressors:
    """zcat and friends (always to stdout); gzip, xz, bzip2, zstd only with -c/--stdout, -l or -t."""

    commands = ("zcat", "bzcat", "xzcat", "zstdcat", "lzcat", "gzip", "gunzip", "xz", "unxz", "bzip2", "bunzip2",
                "zstd", "unzstd")

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        if inv.name.endswith("cat"):
            return [inv.action(inv.name, inv.name, mutating=False)]
        f = _flags(args)
        if f & {"c", "l", "t", "--stdout", "--to-stdout", "--list", "--test"}:
            return [inv.action(inv.name, inv.name, mutating=False)]
        # Without -c the file is replaced by its (de)compressed copy: both files change.
        return [inv.opaque(inv.name, f"{inv.name} without -c replaces files in place; read with {inv.name} -dc FILE "
                           "(or zcat)", tool=inv.name)]


@register
class Tar:
    """tar: listing (t, --list) reads; extracting or creating writes files the guard cannot enumerate."""

    commands = ("tar",)

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        first = args[0] if args else ""
        # `tar tzf x` (old style, no dash), `tar -tzf x`, `tar --list -f x`.
        mode = set(first) if first and not first.startswith("-") else _flags(args)
        if ("t" in mode or "--list" in mode) and not ({"x", "c", "r", "u", "A"} & mode) and \
                not any(a.startswith("--to-command") or a.startswith("--use-compress-program") or
                        a.startswith("--checkpoint-action") or a == "-I" for a in args):
            return [inv.action("tar", "list", mutating=False)]
        return [inv.opaque("tar", "tar extracts or writes files the guard cannot enumerate before it runs; list the "
                           "archive with tar tf", tool="tar")]


# git subcommands that only read the repository (no hooks, pagers or diff drivers they run are set here).
_GIT_READS = {"log", "show", "diff", "status", "blame", "ls-files", "ls-tree", "rev-parse", "describe", "shortlog",
              "grep", "cat-file", "reflog", "whatchanged", "version", "help"}


@register
class Git:
    """git: the commands that read; the rest change the repository or the working tree (opaque)."""

    commands = ("git",)

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        # -c key=value and --exec-path / -C dir come before the subcommand; -c can set a pager or an alias that runs
        # a program, so a command with it is not taken for a read.
        i = 0
        while i < len(args) and args[i].startswith("-"):
            if args[i] in ("-c", "--config-env") or args[i].startswith(("--exec-path", "-c")):
                return [inv.opaque("git", "git -c sets configuration (a pager, an alias) that can run a program",
                                   tool="git")]
            i += 2 if args[i] in ("-C", "--git-dir", "--work-tree", "--namespace") else 1
        sub = args[i] if i < len(args) else ""
        rest = args[i + 1:]
        if sub in _GIT_READS and not any(a.startswith(("--ext-diff", "--output", "--textconv")) for a in rest):
            return [inv.action("git", sub, mutating=False)]
        if sub in ("branch", "tag", "remote", "stash", "config") and (
                not rest or rest[0] in ("-l", "--list", "-v", "-vv", "-a", "-r", "show", "get", "--get", "list")):
            return [inv.action("git", sub, mutating=False)]
        return [inv.opaque("git", f"git {sub or '(no command)'} changes the repository or runs hooks", tool="git")]


@register
class Openssl:
    """openssl: a TLS handshake check, a certificate printed, the version; anything else (enc, a key written) opaque."""

    commands = ("openssl",)

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        sub = args[0] if args else ""
        writes = any(a in ("-out", "-keyout", "-sess_out", "-msg", "-trace") for a in args)
        if sub in ("s_client", "version", "x509", "verify", "ciphers", "req", "crl") and not writes and \
                (sub != "req" or "-noout" in args) and (sub != "x509" or "-noout" in args or "-in" in args):
            return [inv.action("openssl", sub, mutating=False)]
        return [inv.opaque("openssl", f"openssl {sub or ''} decodes, writes or generates something the guard does "
                           "not read".strip(), tool="openssl")]


@register
class SchemaDump:
    """pg_dump, mysqldump: a dump to stdout reads (and to a file, with -f or --result-file, writes that file);
    pg_dumpall's roles carry password hashes, so it stays opaque."""

    commands = ("pg_dump", "mysqldump", "mariadb-dump")

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        out = None
        for n, a in enumerate(args):
            if a in ("-f", "--file", "-r", "--result-file") and n + 1 < len(args):
                out = args[n + 1]
            elif re.match(r"^(--file|--result-file)=", a):
                out = a.split("=", 1)[1]
            elif re.match(r"^-[fr]\S", a):
                out = a[2:]
        acts = [inv.action(inv.name, "dump", mutating=False,
                           details={"schema_only": any(a in ("--schema-only", "-s", "--no-data", "-d")
                                                       for a in args)})]
        if out is not None and out != "-":
            acts.append(file_write(inv, out, by=inv.name))
        return acts
