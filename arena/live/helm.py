"""`helm` on the live shell: `get values` and `upgrade --set` of a substrate's release, answered by `arena.live.control`.

Put on PATH as `helm` by `arena.live.stack`. Supported, with Helm's output shapes:

  helm get values RELEASE [-o yaml|json]
  helm upgrade RELEASE CHART [--reuse-values] [--wait] [-f FILE|-]... [--set K=V]... [-n NS]

The chart path is accepted and not read: the release's values live in the stack's values files (see the
control plane). Anything else exits 1 with an error.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

import yaml

from arena.live.kubectl import _call, _fail, serve

__all__ = ["run", "main"]


def run(argv: Sequence[str]) -> tuple[str, str, int]:
    args, sets, reuse, output = [], [], False, "yaml"
    files: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("-f", "--values"):
            files.append(next(it, ""))
        elif a.startswith(("--values=", "-f=")):
            files.append(a.split("=", 1)[1])
        elif a == "--set":
            sets.append(next(it, ""))
        elif a.startswith("--set="):
            sets.append(a.split("=", 1)[1])
        elif a == "--reuse-values":
            reuse = True
        elif a in ("--wait", "--atomic", "--install", "-i") or a.startswith("--timeout"):
            pass
        elif a in ("-n", "--namespace", "--timeout"):
            next(it, None)
        elif a in ("-o", "--output"):
            output = next(it, "yaml")
        else:
            args.append(a)
    if args[:2] == ["get", "values"] and len(args) == 3:
        status, body = _call("GET", f"/helm/{args[2]}/values")
        if status != 200:
            return _fail(status, body)
        values = json.loads(body)
        if output == "json":
            return json.dumps(values) + "\n", "", 0
        return "USER-SUPPLIED VALUES:\n" + yaml.safe_dump(values, sort_keys=False), "", 0
    if args[:1] == ["upgrade"] and len(args) == 3:
        release = args[1]
        docs = []
        for f in files:
            # `-f -` reads the values from stdin, as helm does.
            try:
                text = sys.stdin.read() if f == "-" else open(f).read()
                docs.append(yaml.safe_load(text) or {})
            except (OSError, yaml.YAMLError) as e:
                return "", f"Error: cannot read values {f}: {e}\n", 1
            if not isinstance(docs[-1], dict):
                return "", f"Error: values {f} is not a YAML mapping\n", 1
        status, body = _call("POST", f"/helm/{release}/upgrade", {"set": sets, "values": docs,
                                                                  "reuse_values": reuse})
        if status != 200:
            return _fail(status, body)
        rev = json.loads(body)["revision"]
        return (f'Release "{release}" has been upgraded. Happy Helming!\nNAME: {release}\nSTATUS: deployed\n'
                f"REVISION: {rev}\n"), "", 0
    return "", f"Error: the live stack's helm does not support `helm {' '.join(args)}`\n", 1


def main() -> None:
    serve(run)


if __name__ == "__main__":
    main()
