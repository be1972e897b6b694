"""File writes by command: sed -i, tee, cp, mv, rm, chmod, chown, truncate, touch, mkdir, ln, dd, install.

Registered for those names; called by `Normaliser.dispatch`. Each file written is one Action with key
`file:<path>`; the layer is runtime inside `kubectl exec` (the container's writable layer, gone on restart) and
declared elsewhere. Redirections (`>`, `>>`) are turned into the same Actions by the shell walker (`file_write`).
"""

from __future__ import annotations

import re
import shlex

from guardrail.actions.classifiers.base import OptionSpec, Parsed, register, resolve_long
from guardrail.actions.invocation import Invocation
from guardrail.actions.model import UNKNOWN, Action
from guardrail.actions.filewrite import NULL_SINKS, file_write
from guardrail.actions.words import Word

# sed's `e` command, or the `e` flag of `s///`, runs the pattern space as a shell command.
_S = r"s(?P<d>[^\\\n])(?:\\.|(?!(?P=d)).)*(?P=d)(?:\\.|(?!(?P=d)).)*(?P=d)"
# Any command may stand after an address: a line (`1`, `0~2`), the last line (`$`), a regex (`/re/`, `\%re%`), a
# range of two, and `!` to invert it (`1e cmd`, `$e cmd`, `/./e cmd`, `1,5!w out`).
_ADDR1 = r"(?:\d+(?:~\d+)?|\$|/(?:\\.|[^/\n])*/[IM]*|\\(?P<c>.)(?:\\.|(?!(?P=c)).)*(?P=c)[IM]*)"
_ADDR = rf"(?:{_ADDR1}(?:\s*,\s*(?:{_ADDR1.replace('?P<c>', '?:').replace('(?P=c)', '.')}|[+~]\d+))?\s*!?\s*)?"
_CMD_START = r"(?:^|[;\n{}])\s*" + _ADDR
_SED_EXEC = re.compile(_S + r"[gpIiMm0-9w]*e|" + _CMD_START + r"e(?:\s|;|$|})")
_SED_WRITE = re.compile(_CMD_START + r"w\s*(?P<cmd>[^\s;}]\S*)|" + _S + r"[gpIiMm0-9e]*w\s*(?P<flag>\S+)")

__all__ = ["Sed", "Tee", "CopyMove", "Remove", "Attributes", "Create", "SSH_OPTIONS", "ssh_hidden"]


# GNU sed's long options.
_SED_LONG = frozenset({"--in-place", "--expression", "--file", "--quiet", "--silent", "--regexp-extended",
                       "--separate", "--sandbox", "--null-data", "--zero-terminated", "--unbuffered", "--line-length",
                       "--posix", "--debug", "--follow-symlinks", "--binary", "--help", "--version"})


@register
class Sed:
    """sed: read-only unless -i (in place), or its script writes files (w) or runs commands (e)."""

    commands = ("sed", "gsed")

    def classify(self, inv: Invocation) -> list[Action]:
        args = list(inv.args)
        in_place = False
        scripts: list[str] = []
        files: list[str] = []
        i = 0
        while i < len(args):
            a = resolve_long(str(args[i]), _SED_LONG)  # `--in-pl`, `--expr=...`: GNU sed takes any unique prefix
            if a.startswith("--in-place") or re.fullmatch(r"-[nrEsuzl]*i.*", a):
                in_place = True
            elif a in ("-e", "--expression") and i + 1 < len(args):
                scripts.append(str(args[i + 1]))
                i += 1
            elif a.startswith("--expression="):
                scripts.append(a.split("=", 1)[1])
            elif a in ("-f", "--file") and i + 1 < len(args):
                return [inv.opaque("script-file", f"sed -f {args[i + 1]}: the sed script is not visible", tool="sed")]
            elif a.startswith("-") and a != "-":
                pass
            elif not scripts and not files and not any(str(x) in ("-e", "--expression") for x in args):
                scripts.append(a)
            else:
                files.append(a)
            i += 1
        script = ";".join(scripts)
        if _SED_EXEC.search(script):
            return [inv.opaque("sed e", "the sed script runs shell commands (e)", tool="sed", script=script)]
        writes = [m.group("cmd") or m.group("flag") for m in _SED_WRITE.finditer(script)]
        out: list[Action] = []
        if in_place:
            out += [file_write(inv, f, verb="edit", by="sed -i", script=script) for f in files] or \
                   [inv.action("file", "edit", mutating=UNKNOWN, opaque_reason="sed -i on files not named")]
        else:
            out.append(inv.action("sed", "read", mutating=False, details={"script": script}))
        for w in writes:
            path = w
            if path and path not in NULL_SINKS:
                out.append(file_write(inv, path, by="sed w"))
        return out


@register
class Tee:
    """tee: writes stdin to each file (and passes it on)."""

    commands = ("tee",)

    def classify(self, inv: Invocation) -> list[Action]:
        p = OptionSpec.of(["--output-error"], long_flags={"--append", "--ignore-interrupts", "--help",
                                                          "--version"}).parse(inv.args)
        append = p.has("-a", "--append")
        content = inv.stdin.text if inv.stdin is not None else None
        paths = [str(f) for f in p.positionals if str(f) not in NULL_SINKS]
        if not paths:
            return [inv.action("tee", "passthrough", mutating=False)]
        return [file_write(inv, f, verb="append" if append else "write", content=content, by="tee") for f in paths]


# ssh's options that take a value (ssh, and the ssh that scp and `rsync -e ssh` run).
SSH_OPTIONS = OptionSpec.of(["-p", "-i", "-l", "-o", "-F", "-J", "-L", "-R", "-D", "-b", "-c", "-E", "-e", "-I", "-m",
                             "-O", "-Q", "-S", "-W", "-w", "-B", "-P"], stop_at_positional=True)
_SCP_OPTIONS = OptionSpec.of(["-c", "-D", "-F", "-i", "-J", "-l", "-o", "-P", "-S", "-X"])
# ssh configuration keys that run a program on this machine, a command the command line does not show, or load a
# library into ssh (in -o, or in a config file: which -F names, or ~/.ssh/config that PermitLocalCommand arms).
_SSH_RUNS = frozenset({"localcommand", "permitlocalcommand", "proxycommand", "knownhostscommand", "remotecommand",
                       "pkcs11provider", "securitykeyprovider", "include", "match"})


def ssh_hidden(p: Parsed) -> str | None:
    """Why an ssh (or scp, or `rsync -e ssh`) with these options runs something its command line does not show, or
    None: a config file (-F, but /dev/null), an -o that runs a local or remote command or loads a library, -I."""
    cfg = p.get("-F")
    if cfg is not None and str(cfg) not in ("/dev/null", "none"):
        return f"-F {cfg}: a config file can make ssh run commands (ProxyCommand, LocalCommand) the guard does not see"
    if p.get("-I") is not None:
        return "-I loads a PKCS#11 library into ssh"
    for o in p.all("-o"):
        key = re.split(r"[=\s]", str(o).strip(), maxsplit=1)[0].lower()
        if key in _SSH_RUNS or o.dynamic:
            return f"-o {o}: ssh runs a command for it that the guard does not read"
    return None


def _remote_copy_hidden(inv: Invocation) -> str | None:
    """What an scp or rsync runs besides copying: scp's -S/-D program, rsync's -e/--rsh shell (other than ssh with
    plain options) and --rsync-path, and the ssh options of either."""
    if inv.name == "scp":
        p = _SCP_OPTIONS.parse(inv.args)
        for o in ("-S", "-D"):
            if p.get(o) is not None:
                return f"scp {o} {p.get(o)} runs that program in place of ssh"
        return ssh_hidden(p)
    p = OptionSpec.of(["-e", "--rsh", "--rsync-path"], {"--rsh": "-e"}).parse(inv.args)
    rsh, path = p.get("-e"), p.get("--rsync-path")
    if path is not None and (path.dynamic or not all(w == "sudo" or w.rsplit("/", 1)[-1] == "rsync"
                                                       for w in str(path).split())):
        return f"rsync --rsync-path={path} runs that command on the other side"
    if rsh is None:
        return None
    try:
        words = shlex.split(str(rsh))
    except ValueError:
        words = []
    if rsh.dynamic or not words or words[0].rsplit("/", 1)[-1] != "ssh":
        return f"rsync -e {rsh!r} runs that program as its remote shell"
    hidden = ssh_hidden(SSH_OPTIONS.parse([Word.of(w) for w in words[1:]]))
    return f"rsync -e ssh {hidden}" if hidden else None


@register
class CopyMove:
    """cp, mv, install, ln: the destination is written (mv also removes the source)."""

    commands = ("cp", "mv", "install", "ln", "rsync", "scp")

    def classify(self, inv: Invocation) -> list[Action]:
        if inv.name in ("scp", "rsync"):
            hidden = _remote_copy_hidden(inv)
            if hidden:
                return [inv.opaque(inv.name, f"{hidden}; copy with plain options, or run the command directly",
                                   tool=inv.name)]
        spec = _SCP_OPTIONS if inv.name == "scp" else _COPY_SPECS.get(inv.name) or OptionSpec.of(
            ["-t", "--target-directory", "-S", "--suffix", "-m", "--mode", "-o", "--owner", "-g", "--group", "-e",
             "--exclude", "--include", "-P", "-i", "-F"], {"--target-directory": "-t"})
        p = spec.parse(inv.args)
        if inv.name == "install" and p.get("--strip-program") is not None:
            return [inv.opaque("install", "install --strip-program runs a program of the caller's choice on each "
                               "file; install without it", tool="install")]
        files = [str(f) for f in p.positionals]
        target_dir = p.get("-t")
        if target_dir is not None:
            dests, sources = [str(target_dir)], files
        elif len(files) >= 2:
            dests, sources = [files[-1]], files[:-1]
        else:
            return [inv.action("file", inv.name, mutating=UNKNOWN,
                               opaque_reason=f"{inv.name} without a source and a destination")]
        mode = p.get("-m") if inv.name == "install" else None
        special = {"mode": str(mode), "sets_id_bit": True} if mode is not None and sets_id_bit(str(mode)) else {}
        out = [file_write(inv, d, by=inv.name, sources=sources, **special) for d in dests]
        if inv.name == "mv":
            out += [file_write(inv, s, verb="delete", by="mv") for s in sources]
        return out


# GNU coreutils' option tables for cp, mv, install and ln: the options that take a value, and the long ones that
# take none or only an attached one (`--backup[=CONTROL]`). getopt_long takes any unambiguous prefix of a long
# option (`cp --target-d /etc x` writes /etc/x, `install --mo 4755` sets a mode), so each table is complete.
_COPY_VALUES = {
    "cp": ["-S", "--suffix", "-t", "--target-directory", "--no-preserve", "--sparse"],
    "mv": ["-S", "--suffix", "-t", "--target-directory"],
    "install": ["-g", "--group", "-m", "--mode", "-o", "--owner", "-S", "--suffix", "-t", "--target-directory",
                "--strip-program"],
    "ln": ["-S", "--suffix", "-t", "--target-directory"],
}
_COPY_FLAGS = {
    "cp": {"--archive", "--attributes-only", "--backup", "--copy-contents", "--debug", "--force", "--interactive",
           "--link", "--dereference", "--no-clobber", "--no-dereference", "--preserve", "--parents", "--recursive",
           "--reflink", "--remove-destination", "--strip-trailing-slashes", "--symbolic-link",
           "--no-target-directory", "--update", "--verbose", "--one-file-system", "--context", "--keep-directory-symlink",
           "--help", "--version"},
    "mv": {"--backup", "--force", "--interactive", "--no-clobber", "--no-copy", "--strip-trailing-slashes",
           "--no-target-directory", "--update", "--verbose", "--context", "--exchange", "--debug", "--help",
           "--version"},
    "install": {"--backup", "--compare", "--directory", "--preserve-timestamps", "--strip", "--no-target-directory",
                "--verbose", "--preserve-context", "--context", "--debug", "--help", "--version"},
    "ln": {"--backup", "--directory", "--force", "--interactive", "--logical", "--no-dereference", "--physical",
           "--relative", "--symbolic", "--no-target-directory", "--verbose", "--help", "--version"},
}
_COPY_SPECS = {tool: OptionSpec.of(_COPY_VALUES[tool], {"--target-directory": "-t", "--suffix": "-S", "--mode": "-m",
                                                        "--owner": "-o", "--group": "-g"},
                                   long_flags=_COPY_FLAGS[tool]) for tool in _COPY_VALUES}
# chmod, chown, chgrp: the same for their options (`chmod --ref=/etc/shadow f`, `chown --rec`).
_ATTR_SPECS = {
    "chmod": OptionSpec.of(["--reference"], long_flags={"--changes", "--no-preserve-root", "--preserve-root",
                                                        "--quiet", "--silent", "--recursive", "--verbose", "--help",
                                                        "--version"}),
    "chown": OptionSpec.of(["--reference", "--from"], long_flags={
        "--changes", "--dereference", "--no-dereference", "--no-preserve-root", "--preserve-root", "--quiet",
        "--silent", "--recursive", "--verbose", "--help", "--version"}),
    "chgrp": OptionSpec.of(["--reference"], long_flags={
        "--changes", "--dereference", "--no-dereference", "--no-preserve-root", "--preserve-root", "--quiet",
        "--silent", "--recursive", "--verbose", "--help", "--version"}),
}


# Each tool's long options without a value (GNU: any unambiguous prefix of one is accepted: `rm --r` is -r).
_RM_LONG = {
    "rm": frozenset({"--force", "--interactive", "--one-file-system", "--no-preserve-root", "--preserve-root",
                     "--recursive", "--dir", "--verbose", "--help", "--version"}),
    "rmdir": frozenset({"--ignore-fail-on-non-empty", "--parents", "--verbose", "--help", "--version"}),
    "shred": frozenset({"--exact", "--force", "--remove", "--zero", "--random-source", "--verbose", "--help",
                        "--version"}),
    "unlink": frozenset({"--help", "--version"}),
}


@register
class Remove:
    """rm, unlink, rmdir, shred."""

    commands = ("rm", "unlink", "rmdir", "shred")

    def classify(self, inv: Invocation) -> list[Action]:
        p = OptionSpec.of(["-n", "--iterations", "-s", "--size"], long_flags=_RM_LONG.get(inv.name, frozenset())).parse(inv.args)
        files = [str(f) for f in p.positionals] + [str(f) for f in (p.after_dashdash or [])]
        recursive = p.has("-r", "-R", "--recursive")
        if not files:
            return [inv.action("file", "delete", mutating=UNKNOWN, opaque_reason=f"{inv.name} with no file named")]
        return [file_write(inv, f, verb="delete", by=inv.name, recursive=recursive) for f in files]


_SYMBOLIC_CLAUSE = re.compile(r"^([ugoa]*)((?:[-+=][rwxXstugo]*)+)$")


def sets_id_bit(mode: str) -> bool:
    """Whether chmod / install -m MODE turns on the set-user-ID or set-group-ID bit (a copy of bash made setuid
    runs as its owner for anyone): an octal mode with 4000 or 2000 (`4755`, `02755`), or a symbolic clause that
    adds or sets `s` (`u+s`, `+s`, `g=rwxs`, `a+rs`)."""
    mode = mode.strip()
    if re.fullmatch(r"[0-7]{1,5}", mode):
        return bool(int(mode, 8) & 0o6000)
    for clause in mode.split(","):
        m = _SYMBOLIC_CLAUSE.match(clause)
        if m is None:
            continue
        who, ops = m.group(1), m.group(2)
        if who and not set(who) & set("uga"):
            continue  # o+s does nothing
        for op in re.findall(r"[-+=][rwxXstugo]*", ops):
            if op[0] in "+=" and "s" in op:
                return True
    return False


@register
class Attributes:
    """chmod, chown, chgrp, truncate, setfacl: change a file without naming content."""

    commands = ("chmod", "chown", "chgrp", "truncate", "setfacl", "chattr")

    def classify(self, inv: Invocation) -> list[Action]:
        p = (_ATTR_SPECS.get(inv.name) or OptionSpec.of(["-s", "--size", "-r", "--reference", "-m", "-x", "-M",
                                                          "-X"])).parse(inv.args)
        pos = [str(f) for f in p.positionals] + [str(f) for f in (p.after_dashdash or [])]
        if inv.name in ("chmod", "chown", "chgrp"):
            ref = p.get("--reference")
            # --reference=RFILE takes the mode or owner from RFILE: every positional is then a file.
            mode, files = (f"--reference={ref}", pos) if ref is not None else (pos[0], pos[1:]) if pos else ("", [])
            # chmod's symbolic modes start with a dash sometimes (chmod -x f): the parser took it as a flag.
            if inv.name == "chmod" and not files and pos:
                mode, files = next((str(a) for a in inv.args if str(a).startswith("-")), ""), pos
            special = {"sets_id_bit": True} if inv.name == "chmod" and sets_id_bit(mode) else {}
            return [file_write(inv, f, verb=inv.name, by=inv.name, mode=mode, **special) for f in files] or \
                [inv.action("file", inv.name, mutating=UNKNOWN, opaque_reason=f"{inv.name} with no file named")]
        size = p.get("-s")
        return [file_write(inv, f, verb=inv.name, by=inv.name, **({"size": str(size)} if size else {}))
                for f in pos] or [inv.action("file", inv.name, mutating=UNKNOWN,
                                             opaque_reason=f"{inv.name} with no file named")]


@register
class Create:
    """touch, mkdir, mkfifo, dd (of=FILE)."""

    commands = ("touch", "mkdir", "mkfifo", "dd")

    def classify(self, inv: Invocation) -> list[Action]:
        if inv.name == "dd":
            dest = next((str(a)[3:] for a in inv.args if str(a).startswith("of=")), None)
            if dest is None or dest in NULL_SINKS:
                return [inv.action("dd", "copy", mutating=False)]
            return [file_write(inv, dest, by="dd")]
        p = OptionSpec.of(["-m", "--mode", "-d", "--date", "-r", "--reference", "-t"]).parse(inv.args)
        return [file_write(inv, str(f), verb="create", by=inv.name) for f in p.positionals] or \
            [inv.action("file", inv.name, mutating=UNKNOWN, opaque_reason=f"{inv.name} with no file named")]
