"""How the decision of one command grows with its size: a `psql -c` of N statements ending in a read the library
denies (`SELECT rolpassword FROM pg_authid`), for N = 20, 200, 2,000 (the 20 KB command of issue #25) and 4,000.

For each N: the actions, the bytes of their policy input (the actions' JSON), Guard.before's wall and CPU time with
the shipped library (memo off, no journal file) and whether the last statement was denied by its rule rather than
by the evaluation deadline. Growth should be linear: ten times the statements, about ten times the bytes and time.
Before the fix (each statement's action carried the whole text; every action's rules read the whole command; one
evaluation of N actions cost N squared) 1,000 statements took 16 s and 2,000 ran past the 10 s deadline.

Prints a table and writes bench/results/input_growth.json.

    python bench/input_growth.py [--out bench/results/input_growth.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from guardrail.context import IncidentContext
from guardrail.guard import Guard
from guardrail.policy.embedded import EmbeddedOPA

ROOT = Path(__file__).resolve().parent.parent
SIZES = (20, 200, 2000, 4000)


def command(n: int) -> str:
    return "psql -c '" + "SELECT 1; " * n + "SELECT rolpassword FROM pg_authid'"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "input_growth.json"))
    args = ap.parse_args()
    rows = []
    with EmbeddedOPA(decision_cache=0) as engine:
        guard = Guard(engine, IncidentContext())
        guard.before(command(2))  # prepare the queries
        for n in SIZES:
            cmd = command(n)
            wall, cpu = time.perf_counter(), time.process_time()
            adm = guard.before(cmd)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            last = adm.decisions[-1]
            rows.append({"statements": n, "chars": len(cmd), "actions": len(adm.actions),
                         "input_bytes": sum(len(json.dumps(a.to_input())) for a in adm.actions),
                         "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "last_rules": last.rule_ids,
                         "engine_error": any(d.error for d in adm.decisions)})
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'statements':>10} {'chars':>7} {'actions':>7} {'input bytes':>12} {'wall s':>7} {'cpu s':>7}  last")
    for r in rows:
        print(f"{r['statements']:>10} {r['chars']:>7} {r['actions']:>7} {r['input_bytes']:>12} {r['wall_s']:>7.2f} "
              f"{r['cpu_s']:>7.2f}  {','.join(r['last_rules']) or 'allow'}{' (engine error)' if r['engine_error'] else ''}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "load_average": load[0]}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
