"""`kubectl` on the live shell: the subset the tasks' operators use, answered by `arena.live.control`.

Put on PATH as `kubectl` by `arena.live.stack` (a wrapper runs `python -m arena.live.kubectl`); LIVE_CONTROL_URL
names the control plane. Supported, with kubectl's output shapes:

  kubectl get pods|deploy [-n NS] [-o wide|json]
  kubectl logs deploy/NAME|POD [--tail=N]
  kubectl rollout restart deployment/NAME          kubectl rollout status deployment/NAME
  kubectl delete pod POD

Anything else gets kubectl's own "unknown command" or a plain error, exit 1. -n/--namespace is accepted and
ignored: the live stack has one namespace per substrate at most.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, Callable, Sequence

__all__ = ["main", "run"]


def _call(method: str, path: str, body: Any = None) -> tuple[int, str]:
    url = os.environ.get("LIVE_CONTROL_URL", "").rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, f"The connection to the server {url} was refused - did you specify the right host or port? ({e})"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "<unknown>"
    s = int(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def _fail(status: int, body: str) -> tuple[str, str, int]:
    try:
        msg = json.loads(body).get("message", body)
    except (json.JSONDecodeError, AttributeError):
        msg = body
    reason = {403: "Forbidden", 404: "NotFound"}.get(status)
    return "", (f"Error from server ({reason}): {msg}" if reason else msg).rstrip() + "\n", 1


def _pods() -> tuple[list[dict[str, Any]] | None, tuple[str, str, int] | None]:
    status, body = _call("GET", "/pods")
    if status != 200:
        return None, _fail(status, body)
    return json.loads(body), None


def _target(ref: str) -> str:
    """deploy/NAME, deployment/NAME, statefulset/NAME or a pod name -> the component name."""
    if "/" in ref:
        return ref.split("/", 1)[1]
    pods, _ = _pods()
    for p in pods or []:
        if p["name"] == ref:
            return p["component"]
    # A StatefulSet's pod keeps its ordinal name (postgres-0) across restarts.
    stem, _, ordinal = ref.rpartition("-")
    if ordinal.isdigit() and any(p["component"] == stem and p["kind"] == "StatefulSet" for p in pods or []):
        return stem
    return ref


def run(argv: Sequence[str]) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of one kubectl invocation."""
    args, output, tail = [], "", -1
    it = iter(argv)
    for a in it:
        if a in ("-n", "--namespace"):
            next(it, None)
        elif a.startswith("--namespace=") or a in ("-A", "--all-namespaces"):
            pass
        elif a == "-o":
            output = next(it, "")
        elif a.startswith("-o") and len(a) > 2:
            output = a[2:].lstrip("=")
        elif a.startswith("--output="):
            output = a.split("=", 1)[1]
        elif a.startswith("--tail="):
            tail = int(a.split("=", 1)[1])
        elif a == "--tail":
            tail = int(next(it, "-1"))
        else:
            args.append(a)
    if not args:
        return "", "kubectl controls the Kubernetes cluster manager.\n", 1
    verb, rest = args[0], args[1:]
    if verb == "get" and rest and rest[0] in ("pods", "pod", "po", "deploy", "deployment", "deployments", "all"):
        pods, err = _pods()
        if err:
            return err
        if rest[0].startswith("deploy"):
            pods = [p for p in pods if p["kind"] == "Deployment"]
        if output == "json":
            return json.dumps({"kind": "List", "items": pods}, indent=2) + "\n", "", 0
        rows = [("NAME", "READY", "STATUS", "RESTARTS", "AGE")]
        rows += [(p["name"], "1/1" if p["ready"] else "0/1", p["status"], str(p["restarts"]), _age(p["age_s"]))
                 for p in pods]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        return "".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows), "", 0
    if verb == "logs" and rest:
        status, body = _call("GET", f"/logs/{_target(rest[0])}?tail={tail}")
        return (body, "", 0) if status == 200 else _fail(status, body)
    if verb == "rollout" and len(rest) == 2 and rest[0] in ("restart", "status"):
        name = rest[1].split("/", 1)[-1]
        if rest[0] == "status":
            pods, err = _pods()
            if err:
                return err
            ready = any(p["component"] == name and p["ready"] for p in pods)
            return (f'deployment "{name}" successfully rolled out\n', "", 0) if ready else \
                ("", f'error: deployment "{name}" exceeded its progress deadline\n', 1)
        status, body = _call("POST", f"/restart/{name}?verb=rollout")
        return (f"deployment.apps/{name} restarted\n", "", 0) if status == 200 else _fail(status, body)
    if verb == "delete" and len(rest) == 2 and rest[0] in ("pod", "pods", "po"):
        status, body = _call("POST", f"/restart/{_target(rest[1])}?verb=delete")
        return (f'pod "{rest[1]}" deleted\n', "", 0) if status == 200 else _fail(status, body)
    if verb in ("get", "logs", "rollout", "delete", "describe", "exec", "apply", "patch", "edit", "scale", "set"):
        return "", f"error: the live stack's kubectl does not support `kubectl {' '.join(args)}`\n", 1
    return "", f'error: unknown command "{verb}" for "kubectl"\n', 1


def serve(client: Callable[[Sequence[str]], tuple[str, str, int]]) -> None:
    """Run a stand-in client on this process' arguments and answer as the real binary: its output, its code."""
    out, err, code = client(sys.argv[1:])
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.exit(code)


def main() -> None:
    serve(run)


if __name__ == "__main__":
    main()
