"""curl and wget: the HTTP method, URL and JSON body, and the admin APIs they drive (with their keys).

Registered for `curl` and `wget`; called by `Normaliser.dispatch`. Recognised APIs (by method and path):
`PUT /admin/config` (body flattened to `app.<path>`, runtime), `POST /admin/reload` (runtime),
`PUT /admin/event {"name","active"}` (`event.<name>`, runtime, target = URL host), `PUT /v1/maintenance`
(`maintenance.<field>`, declared), `PUT /admin/checkpoint` (`app.checkpoint.mode`), `PUT /admin/sequencer`
(`app.sequencer.mode`), a shutdown endpoint (`POST /admin/shutdown`, `/quitquitquit`: details.restart). Any other
URL is classified by method: GET/HEAD/OPTIONS read, the rest write.
"""

from __future__ import annotations

import json
import posixpath
import re
from itertools import islice
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from guardrail.actions.classifiers.base import OptionSpec, Parsed, flatten, register
from guardrail.actions.invocation import STDIN_PATHS, Invocation, Unreadable, read_at_decision, stdin_at_decision
from guardrail.actions.classifiers.helpers import redis_repair
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Mutating, Target
from guardrail.actions.filewrite import NULL_SINKS, file_write

__all__ = ["Curl", "Wget", "http_action"]

_DATA = ("-d", "--data-raw", "--data-binary", "--data-ascii", "--data-urlencode", "--json")
_CURL = OptionSpec.of(
    ["-X", "--request", "-d", "--data", "--data-raw", "--data-binary", "--data-ascii", "--data-urlencode", "--json",
     "-T", "--upload-file", "-H", "--header", "-F", "--form", "--form-string", "-u", "--user", "-o", "--output",
     "-w", "--write-out", "-m", "--max-time", "--connect-timeout", "--retry", "--retry-delay", "--retry-max-time",
     "-x", "--proxy", "-b", "--cookie", "-c", "--cookie-jar", "-A", "--user-agent", "-e", "--referer", "--url",
     "--resolve", "--cacert", "--capath", "--cert", "-E", "--key", "-K", "--config", "--unix-socket",
     "--interface", "--limit-rate", "-r", "--range", "-D", "--dump-header", "--trace", "--trace-ascii", "--stderr",
     "--output-dir", "--max-filesize", "--noproxy", "--proxy-user", "--oauth2-bearer", "-Q", "--quote",
     "--connect-to", "--max-redirs", "-z", "--time-cond", "--expect100-timeout", "-y", "-Y", "--speed-time",
     "--speed-limit", "--aws-sigv4", "--variable", "--expand-data", "--expand-url"],
    {"--request": "-X", "--data": "-d", "--upload-file": "-T", "--header": "-H", "--form": "-F", "--user": "-u",
     "--output": "-o", "--write-out": "-w", "--max-time": "-m", "--proxy": "-x", "--cookie": "-b",
     "--cookie-jar": "-c", "--user-agent": "-A", "--referer": "-e", "--config": "-K", "--range": "-r",
     "--dump-header": "-D", "--quote": "-Q", "--cert": "-E", "--time-cond": "-z", "--head": "-I",
     "--get": "-G", "--remote-name": "-O"})
_WGET = OptionSpec.of(
    ["-O", "--output-document", "--method", "--body-data", "--body-file", "--post-data", "--post-file",
     "--header", "-o", "--output-file", "-a", "--append-output", "-T", "--timeout", "-t", "--tries", "-P",
     "--directory-prefix", "-U", "--user-agent", "--user", "--password", "-e", "--execute", "-i", "--input-file",
     "--load-cookies", "--save-cookies", "--ca-certificate", "--certificate", "--private-key", "--wait"],
    {"--output-document": "-O", "--output-file": "-o", "--append-output": "-a", "--timeout": "-T",
     "--tries": "-t", "--directory-prefix": "-P", "--user-agent": "-U", "--execute": "-e", "--input-file": "-i"})

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


# Options whose `@NAME` value is read from a file (or stdin, `@-`), and whether newlines are kept: curl's -d strips
# CR and LF from a file, --data-binary and --json send it as it is; --data-raw never reads a file.
_FILE_DATA = {"-d": False, "--data-ascii": False, "--data-binary": True, "--json": True, "--data-urlencode": True,
              "-T": True, "--post-file": True, "--body-file": True}
_WHOLE_FILE = ("-T", "--post-file", "--body-file")  # the value is a file name, with no `@`


def _body(inv: Invocation, parts: list[tuple[str, str]]) -> tuple[Any, str | None, str | None]:
    """(body: parsed JSON or text or None, body_file: the @file it names, why the body is not known).

    Every channel of the same body comes to the same value: inline (`-d '{...}'`, `--json`), from stdin (`-d @-`,
    `--data-binary @/dev/stdin`, `-T -`: a heredoc, here-string, pipe from echo/printf/cat, `< file`, a forwarded
    payload) or from a file (`-d @body.json`, read now, bounded: `invocation.read_at_decision`). A part the guard
    cannot read makes the whole body unknown (the caller judges an admin API write opaque)."""
    if not parts:
        return None, None, None
    texts = []
    body_file = None
    for name, part in parts:
        if name in _WHOLE_FILE:
            file_arg: str | None = part
        elif name in _FILE_DATA and part.startswith("@"):
            file_arg = part[1:]
        else:
            file_arg = None
        if file_arg is None:
            texts.append(part)
            continue
        body_file = file_arg
        try:
            if file_arg in STDIN_PATHS:
                text = stdin_at_decision(inv.stdin, inv.where)
            else:
                text = read_at_decision(file_arg, inv.where)
        except Unreadable as e:
            return None, body_file, f"the body is read from {'stdin' if file_arg in STDIN_PATHS else file_arg} " \
                                    f"as the request runs, and the guard cannot read it now ({e})"
        texts.append(text if _FILE_DATA[name] else text.replace("\r", "").replace("\n", ""))
    text = "&".join(t.strip() for t in texts)
    try:
        return json.loads(text), body_file, None
    except ValueError:
        form = _form(text)
        return (form if form is not None else text), body_file, None


_FORM = re.compile(r"[A-Za-z_][\w.\-\[\]]*=[^&]*(&[A-Za-z_][\w.\-\[\]]*=[^&]*)*")


def _form(text: str) -> dict[str, Any] | None:
    """A form body (`enabled=false&period_s=60`, what -d and --data-urlencode send without JSON) as the object a
    server reads from it: booleans and numbers as such, or None when the text is not a form."""
    if not _FORM.fullmatch(text.strip()):
        return None
    out: dict[str, Any] = {}
    for k, v in parse_qsl(text.strip(), keep_blank_values=True):
        low = v.strip().lower()
        out[k] = True if low == "true" else False if low == "false" else int(v) if re.fullmatch(r"-?\d+", v) else v
    return out


# The Kubernetes API's own paths: /api/v1/namespaces/..., /api/v1/nodes, /apis/<group>/<version>/...
_KUBE_API = re.compile(r"^/(api/v1/(namespaces|nodes|persistentvolumes|persistentvolumeclaims|pods|secrets|services|"
                       r"configmaps|serviceaccounts)|apis/[a-z0-9.-]+(\.k8s\.io|\.openshift\.io)?/v[0-9a-z]+/"
                       r"(namespaces|clusterroles|clusterrolebindings|nodes|deployments|statefulsets|"
                       r"customresourcedefinitions))(/|$)")


# An admin route that names the Redis component it repairs or restarts (frappe-admin's sidecar).
_COMPONENT_ROUTE = re.compile(r"/admin/(?P<component>redis-[a-z0-9-]+?)-(?P<what>repair|restart)$")

# The path of a process's own shutdown or restart endpoint.
_SHUTDOWN = re.compile(r"(^|/)(shutdown|quitquitquit|abortabortabort|(admin|actuator|management)/(restart|stop|kill|"
                       r"exit|terminate))$", re.I)


def _request_path(raw: str) -> str:
    """The path a server routes on: curl removes dot segments (`/admin/./event` is sent as `/admin/event`) and
    web frameworks decode percent-escapes (`/admin/%65vent`) and merge repeated slashes before matching a route.
    A trailing slash is kept."""
    path = unquote(raw or "/")
    trailing = path.endswith("/") and path != "/"
    path = posixpath.normpath(re.sub(r"/+", "/", path if path.startswith("/") else "/" + path))
    return path + "/" if trailing and path != "/" else path


def http_action(inv: Invocation, tool: str, method: str, url: str, body: Any, *,
                details: dict[str, Any] | None = None, method_known: bool = True) -> Action:
    """One HTTP request as an Action, with the admin APIs' keys."""
    u = urlsplit(url if "://" in url else f"http://{url}")
    try:
        host, port = u.hostname or "", u.port
    except ValueError:
        host, port = u.hostname or "", None
    path = _request_path(u.path)
    query = dict(parse_qsl(u.query))
    d: dict[str, Any] = {"url": url, "method": method, "host": host, "path": path, **(details or {})}
    if port is not None:
        d["port"] = port
    if query:
        d["query"] = query
    if body is not None:
        d["body"] = body
    target = inv.service_target(host, "localhost")
    scheme = (u.scheme or "http").lower()
    if scheme not in ("http", "https", "file"):
        # gopher://, dict://, telnet:// ... speak a raw protocol: `gopher://redis:6379/_FLUSHALL` is a redis command.
        d["scheme"] = scheme
        return inv.action(tool, scheme, target=target, mutating=UNKNOWN, details=d,
                          opaque_reason=f"a {scheme}:// request sends raw protocol data to {host or 'a service'}; "
                                        "use the service's own client instead")
    if _KUBE_API.match(path) or host.startswith("kubernetes.default") or host == "kubernetes":
        # The Kubernetes API called directly (through `kubectl proxy`, or with a token): past every rule that reads
        # kubectl's kinds and names.
        d["kube_api"] = True
        return inv.action(tool, method.lower(), target=target, mutating=UNKNOWN, details=d,
                          opaque_reason="a request to the Kubernetes API by path, which the guard does not read; "
                                        "use kubectl for it, so the guard can check the kind and name")
    mutating: Mutating = (method not in _READ_METHODS) if method_known else UNKNOWN
    layer = Layer.NONE
    keys: list[KeyChange] = []
    obj = body if isinstance(body, dict) else (query if query else {})
    p = path.rstrip("/")
    if mutating is True:
        if p.endswith("/admin/config"):
            d["api"] = "admin/config"
            layer = Layer.RUNTIME
            keys = [KeyChange(key=k, value=v) for k, v in flatten(obj, "app")] if obj else []
        elif p.endswith("/admin/reload"):
            d["api"] = "admin/reload"
            layer = Layer.RUNTIME
        elif p.endswith("/admin/event"):
            d["api"] = "admin/event"
            layer = Layer.RUNTIME
            name = obj.get("name") if isinstance(obj, dict) else None
            if name is not None:
                active = obj.get("active")
                if isinstance(active, str) and active.lower() in ("true", "false"):
                    active = active.lower() == "true"
                keys = [KeyChange(key=f"event.{name}", value=active, scope={"component": target.name})]
        elif p.endswith("/v1/maintenance") or p.endswith("/maintenance"):
            d["api"] = "maintenance"
            layer = Layer.DECLARED
            sched = obj.get("schedule") if isinstance(obj.get("schedule"), dict) else obj
            keys = [KeyChange(key=f"maintenance.{k}", value=v) for k, v in sched.items()] if sched else []
        elif p.endswith("/admin/checkpoint") or p.endswith("/admin/sequencer"):
            what = p.rsplit("/", 1)[-1]
            d["api"] = f"admin/{what}"
            layer = Layer.RUNTIME
            if "mode" in obj:
                keys = [KeyChange(key=f"app.{what}.mode", value=obj["mode"])]
        elif (m := _COMPONENT_ROUTE.search(p)) is not None:
            # A platform admin sidecar's route that names the component it acts on (frappe-admin's
            # /admin/redis-queue-repair and /admin/redis-queue-restart): judged on that component, as the helper
            # that calls the same route is (classifiers/helpers.py).
            component, what = m.group("component"), m.group("what")
            d["api"] = f"admin/{component}-{what}"
            target = Target(kind="component", name=component, namespace=target.namespace)
            if what == "restart":
                d["restart"] = True
            elif isinstance(obj.get("operation"), str):
                change, layer = redis_repair(component, obj["operation"], obj.get("value"))
                keys = [change]
                d["operation"] = obj["operation"]
        elif p.endswith("/declare") or p.endswith("/declare_repair_complete") or "/grader/" in p:
            d["api"] = "grader"
        elif _SHUTDOWN.search(p):
            # A service's own shutdown or restart endpoint (Spring's /actuator/shutdown, Envoy's /quitquitquit, an
            # /admin/shutdown): the process exits and its pod restarts it, as a restart does.
            d["api"] = "shutdown"
            d["restart"] = True
    elif mutating is False and any(p.endswith(s) for s in ("/admin/config", "/admin/event", "/v1/maintenance",
                                                            "/admin/sequencer", "/admin/checkpoint")):
        d["api"] = p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] if "/admin/" in p else "maintenance"
    unseen = d.get("body_unseen")
    if mutating is True and d.get("api") and body is None and unseen:
        # An admin API whose payload the guard cannot read now (a file missing or too large, a stdin it was not
        # given): the change it makes cannot be known, and it is not judged as an empty body.
        return inv.action(tool, method, target=target, layer=layer, mutating=UNKNOWN, details=d,
                          opaque_reason=f"the {d['api']} payload: {unseen}; send the JSON inline with -d '...'")
    return inv.action(tool, method, target=target, keys=keys, layer=layer, mutating=mutating,
                      opaque_reason=None if mutating is not UNKNOWN else "the HTTP method is computed at run time",
                      details=d)


# At most this many URLs from one globbed curl URL are judged one by one; beyond it a write is opaque.
MAX_GLOB = 64
_GLOB_RANGE = re.compile(r"([0-9]+)-([0-9]+)(?::([0-9]+))?|([A-Za-z])-([A-Za-z])(?::([0-9]+))?")


def url_globs(url: str) -> list[str] | None:
    """The URLs curl makes of one with globs (unless -g): `{a,b}` is each alternative, `[1-3]`, `[01-10]`, `[a-z]`
    and `[a-z:2]` each value of the range; a backslash keeps a following `{}[],` literal. A `[...]` that is no range
    (an IPv6 host) is kept as written. None when there would be more than MAX_GLOB."""
    if not any(c in url for c in "{["):
        return [url]
    out = [""]
    i = 0
    while i < len(url):
        c = url[i]
        alts: list[str] | None = None
        if c == "\\" and i + 1 < len(url) and url[i + 1] in "{}[],":
            alts, i = [url[i + 1]], i + 2
        elif c == "{" and "}" in url[i:]:
            end = url.index("}", i)
            alts, i = url[i + 1:end].split(","), end + 1
        elif c == "[" and "]" in url[i:]:
            end = url.index("]", i)
            alts = _glob_range(url[i + 1:end])
            if alts is None:
                alts, i = [url[i:end + 1]], end + 1
            else:
                i = end + 1
        else:
            alts, i = [c], i + 1
        if len(out) * len(alts) > MAX_GLOB:
            return None
        out = [o + a for o in out for a in alts]
    return out


def _glob_range(spec: str) -> list[str] | None:
    """The values of a curl `[x-y]` / `[x-y:step]` range (at most MAX_GLOB + 1 of them), or None if not a range."""
    m = _GLOB_RANGE.fullmatch(spec)
    if m is None:
        return None
    if m.group(1) is not None:
        width = len(m.group(1)) if m.group(1).startswith("0") else 0
        values = range(int(m.group(1)), int(m.group(2)) + 1, max(1, int(m.group(3) or 1)))
        return [str(v).zfill(width) for v in islice(values, MAX_GLOB + 1)]
    letters = range(ord(m.group(4)), ord(m.group(5)) + 1, max(1, int(m.group(6) or 1)))
    return [chr(v) for v in letters]


def _curl_method(p: Parsed) -> tuple[str, bool]:
    explicit = p.get("-X")
    if explicit is not None:
        return str(explicit).upper(), not getattr(explicit, "dynamic", False)
    if p.has("-I"):
        return "HEAD", True
    if p.has("-G"):
        return "GET", True
    if p.get("-T") is not None:
        return "PUT", True
    if any(p.get(o) is not None for o in _DATA) or p.get("-F") is not None or p.get("--form-string") is not None:
        return "POST", True
    return "GET", True


@register
class Curl:
    """curl."""

    commands = ("curl",)

    def classify(self, inv: Invocation) -> list[Action]:
        p = _CURL.parse(inv.args)
        if p.get("-K") is not None:
            return [inv.opaque("config", f"curl -K {p.get('-K')}: the request is defined in a file that is not "
                               "visible", tool="curl")]
        method, known = _curl_method(p)
        urls = [str(u) for u in p.positionals] + [str(u) for u in p.all("--url")]
        parts = [(name, str(v)) for name, v in p.order if name in _DATA + ("-T",) and v is not None]
        body, body_file, unseen = _body(inv, parts)
        details: dict[str, Any] = {}
        if body_file:
            details["body_file"] = body_file
        if unseen:
            details["body_unseen"] = unseen
        if p.get("-T") is not None:
            details["upload_file"] = str(p.get("-T"))
        if p.get("--json") is not None:
            details["content_type"] = "application/json"
        if not urls:
            if inv.args_pending:
                return [inv.opaque("request", "curl with its URL read from stdin at run time", tool="curl")]
            return [inv.action("curl", "help", mutating=False)]
        out = []
        for u in urls:
            many = [u] if p.has("-g", "--globoff") else url_globs(u)
            if many is None and (method not in _READ_METHODS or not known):
                return [inv.opaque("request", f"curl expands {u[:80]!r} into more than {MAX_GLOB} URLs (its {{a,b}} "
                                   "and [x-y] globs); send the requests one by one, or pass -g to turn globbing off",
                                   tool="curl", url=u)]
            # The glob stays on its own URLs' actions (details is shared by every URL of the command).
            glob = {"url_glob": u} if many is not None and many != [u] else {}
            out += [http_action(inv, "curl", method, x, body, details={**details, **glob}, method_known=known)
                    for x in (many or [u])]
        dest = p.get("-o")
        if dest is not None and str(dest) not in NULL_SINKS:
            out.append(file_write(inv, str(dest), by="curl -o"))
        elif p.has("-O"):
            name = urlsplit(urls[0] if "://" in urls[0] else "http://" + urls[0]).path.rsplit("/", 1)[-1]
            out.append(file_write(inv, name or "index.html", by="curl -O"))
        return out


@register
class Wget:
    """wget."""

    commands = ("wget",)

    def classify(self, inv: Invocation) -> list[Action]:
        p = _WGET.parse(inv.args)
        if p.get("-i") is not None or p.get("-e") is not None:
            return [inv.opaque("request", "wget reads its requests or settings from elsewhere", tool="wget")]
        method = str(p.get("--method") or ("POST" if p.get("--post-data") is not None
                                           or p.get("--post-file") is not None else "GET")).upper()
        parts = [(name, str(v)) for name, v in p.order
                 if name in ("--post-data", "--body-data", "--post-file", "--body-file") and v is not None]
        body, body_file, unseen = _body(inv, parts)
        details = {k: v for k, v in (("body_file", body_file), ("body_unseen", unseen)) if v}
        urls = [str(u) for u in p.positionals]
        if not urls:
            return [inv.action("wget", "help", mutating=False)]
        out = [http_action(inv, "wget", method, u, body, details=details) for u in urls]
        dest = p.get("-O")
        if dest is None:
            name = urlsplit(urls[0] if "://" in urls[0] else "http://" + urls[0]).path.rsplit("/", 1)[-1]
            out.append(file_write(inv, name or "index.html", by="wget"))
        elif str(dest) not in NULL_SINKS:
            out.append(file_write(inv, str(dest), by="wget -O"))
        return out
