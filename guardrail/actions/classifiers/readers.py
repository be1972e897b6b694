"""Diagnostics that read in one mode and write in another: compressed logs, archives, git, TLS checks, schema dumps.

Unknown commands are opaque (denied by default), and these were among the commonest false denials an operator
meets (`zcat app.log.2.gz`, `tar tzf backup.tgz`, `git log`, `pg_dump --schema-only`). Each is read-only only in
the modes that leave every file as it was and print to stdout; any other mode stays opaque, or is the file write
it is. Registered by command name; called by `Normaliser.dispatch`.
"""

from __future__ import annotations

from guardrail.actions.classifiers.base import OptionSpec, register
from guardrail.actions.invocation import Invocation
from guardrail.actions.model import Action
from guardrail.actions.shell import file_write
from guardrail.actions.words import Word

__all__ = ["Decompressors", "Tar", "Git", "Openssl", "SchemaDump"]

# The options that take a value, so that a value is not read as flags (`xz -T 0`, `tar -f x.tgz`).
_COMPRESSOR = OptionSpec.of(["-S", "--suffix", "-T", "--threads", "-M", "--memlimit", "-F", "--format", "-o",
                             "--output"], {"--output": "-o"})
_TAR = OptionSpec.of(["-f", "--file", "-C", "--directory", "-T", "--files-from", "-X", "--exclude-from", "-b",
                      "-I", "--use-compress-program", "--to-command", "--checkpoint-action"],
                     {"--file": "-f", "--directory": "-C", "--files-from": "-T", "--exclude-from": "-X",
                      "--use-compress-program": "-I"})
_DUMP = OptionSpec.of(["-f", "--file", "-r", "--result-file"], {"--file": "-f", "--result-file": "-r"})


@register
class Decompressors:
    """zcat and friends (always to stdout); gzip, xz, bzip2, zstd only with -c/--stdout, -l or -t."""

    commands = ("zcat", "bzcat", "xzcat", "zstdcat", "lzcat", "gzip", "gunzip", "xz", "unxz", "bzip2", "bunzip2",
                "zstd", "unzstd")

    def classify(self, inv: Invocation) -> list[Action]:
        if inv.name.endswith("cat"):
            return [inv.action(inv.name, inv.name, mutating=False)]
        p = _COMPRESSOR.parse(list(inv.args))
        if p.get("-o") is not None:  # zstd -o FILE: the output goes to that file
            return [inv.action(inv.name, inv.name, mutating=False), file_write(inv, str(p.get("-o")), by=inv.name)]
        if p.has("-c", "-l", "-t", "--stdout", "--to-stdout", "--list", "--test"):
            return [inv.action(inv.name, inv.name, mutating=False)]
        # Without -c the file is replaced by its (de)compressed copy: both files change.
        return [inv.opaque(inv.name, f"{inv.name} without -c replaces files in place; read with {inv.name} -dc FILE "
                           "(or zcat)", tool=inv.name)]


@register
class Tar:
    """tar: listing (t, --list) reads; extracting or creating writes files the guard cannot enumerate."""

    commands = ("tar",)

    def classify(self, inv: Invocation) -> list[Action]:
        args = list(inv.args)
        # `tar tzf x` (old style: the first word is the bundled letters, no dash), `tar -tzf x`, `tar --list -f x`.
        if args and not args[0].startswith("-"):
            args = [Word.of("-" + args[0]), *args[1:]]
        p = _TAR.parse(args)
        if p.has("-t", "--list") and not p.has("-x", "-c", "-r", "-u", "-A", "--extract", "--get", "--create",
                                               "--append", "--update", "--catenate", "--concatenate", "--delete") \
                and not p.has("-I", "--to-command", "--checkpoint-action"):
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
        p = _DUMP.parse(list(inv.args))
        out = p.get("-f") or p.get("-r")
        acts = [inv.action(inv.name, "dump", mutating=False,
                           details={"schema_only": any(a in ("--schema-only", "-s", "--no-data", "-d")
                                                       for a in args)})]
        if out is not None and out != "-":
            acts.append(file_write(inv, str(out), by=inv.name))
        return acts
