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
from guardrail.actions.filewrite import file_write
from guardrail.actions.words import Word

__all__ = ["Decompressors", "Tar", "Git", "Openssl", "SchemaDump", "Firewall"]

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


# tc's options before the object: flags, and -n/-netns with a namespace. -b/-batch runs commands from a file.
_TC_FLAGS = frozenset({"-s", "-stats", "-statistics", "-d", "-details", "-p", "-pretty", "-j", "-json", "-i", "-iec",
                       "-r", "-raw", "-g", "-graph", "-h", "-human", "-t", "-timestamp", "-ts", "-tshort", "-c",
                       "-color", "-color=never", "-color=always", "-color=auto", "-nm", "-name"})
_TC_LISTS = frozenset({"show", "ls", "list", "lst"})
# iptables' listing: -L/--list and -S/--list-rules (one chain, or all), with output modifiers; -t TABLE, -w [SECS].
_IPT_LETTERS = frozenset("LSnvxtw")
_IPT_LONG = frozenset({"--list", "--list-rules", "--numeric", "--verbose", "--exact", "--line-numbers", "--wait",
                       "--table"})
_NFT_FLAGS = frozenset({"-a", "--handle", "-n", "--numeric", "-s", "--stateless", "-j", "--json", "-N", "--reversedns",
                        "-S", "--service", "-u", "--guid", "-y", "--numeric-priority", "-p", "--numeric-protocol",
                        "-T", "--numeric-time", "-t", "--terse"})


@register
class Firewall:
    """tc, iptables, ip6tables, nft: their listings (`tc qdisc show`, `iptables -L -n`, `iptables -S`, `nft list
    ruleset`) read; every other form adds, changes or removes a rule (or reads commands from a file): opaque, and
    judged by the traffic rules as before."""

    commands = ("tc", "iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy", "iptables-nft",
                "ip6tables-nft", "nft")

    def classify(self, inv: Invocation) -> list[Action]:
        args = [str(a) for a in inv.args]
        if not any(a.dynamic for a in inv.args) and inv.stdin is None and self._lists(inv.name, args):
            return [inv.action(inv.name, "list", mutating=False)]
        return [inv.opaque(inv.name, f"{inv.name} {' '.join(args[:3])}: a change to the host's packet filtering or "
                           "shaping (only its listings are known to read: tc qdisc show, iptables -L -n, iptables -S, "
                           "nft list ruleset)".replace("  ", " "))]

    @staticmethod
    def _lists(name: str, args: list[str]) -> bool:
        if name == "tc":
            i = 0
            while i < len(args) and args[i].startswith("-"):
                if args[i] in ("-n", "-netns"):
                    i += 1
                elif args[i] not in _TC_FLAGS:
                    return False
                i += 1
            rest = args[i:]
            # `tc qdisc`, `tc qdisc show dev eth0`, `tc -s class ls`: a listing (tc's default action is show).
            return bool(rest) and rest[0] in ("qdisc", "class", "filter") and (len(rest) == 1 or rest[1] in _TC_LISTS)
        if name == "nft":
            words = [a for a in args if not a.startswith("-")]
            return all(a in _NFT_FLAGS for a in args if a.startswith("-")) and bool(words) and words[0] == "list"
        listed, chains, i = False, 0, 0
        while i < len(args):
            a = args[i]
            if a.startswith("--"):
                key = a.split("=", 1)[0]
                if key not in _IPT_LONG:
                    return False
                listed = listed or key in ("--list", "--list-rules")
                if key == "--table" and "=" not in a:
                    i += 1
            elif a.startswith("-") and len(a) > 1:
                if not set(a[1:]) <= _IPT_LETTERS:
                    return False
                listed = listed or "L" in a or "S" in a
                if a.endswith("t"):
                    i += 1  # -t TABLE
            elif a.isdigit() and i > 0 and args[i - 1].endswith("w"):
                pass  # -w SECS
            else:
                chains += 1  # the chain listed
            i += 1
        return listed and chains <= 1
