"""The load generator's ledger as an SLI source, and the ledger reader the live world's gates use.

The live stack's environment reads its SLIs from Prometheus (`verifiers.clients.prometheus`); `LedgerSLISource`
can be injected instead (`LiveStack.environment(sli_source=...)`) and reads what an operator could equally read: the
load generator's per-request ledger (client-side outcomes and exact latencies), the supervisor's readiness and
restart counts (what `kubectl get pods` shows), and the worker's queue-length gauge through Prometheus' HTTP API.
Semantics match `arena.twin.sli.TwinSLISource`: `step=None` gives one sample per load-phase segment, labelled
`phase` and `cycle`.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Callable, Mapping

from verifiers.protocols import SLI_NAMES, Sample

__all__ = ["LedgerSLISource", "LedgerRow", "read_ledger"]

_PCT = {"latency_p95_ms": 95.0, "latency_p99_ms": 99.0, "latency_p90_ms": 90.0}


class LedgerRow(dict):
    """One ledger line (a dict) with the fields split out that the SLIs need."""

    @property
    def phase(self) -> str:
        return self["phase"].split(".", 1)[1] if "." in self["phase"] else self["phase"]

    @property
    def cycle(self) -> str:
        return self["phase"].split(".", 1)[0][1:] if "." in self["phase"] else "0"


def read_ledger(path: Path, offset: int = 0) -> tuple[list[LedgerRow], int]:
    """Rows appended since `offset` and the new offset; a torn last line is left for the next read."""
    rows: list[LedgerRow] = []
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return rows, offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if line.strip():
            rows.append(LedgerRow(json.loads(line)))
    return rows, offset + end


def _nearest_rank(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[max(0, math.ceil(pct / 100 * len(values)) - 1)]


class LedgerSLISource:
    """Named SLIs over the loadgen ledger (load SLIs) and injected gauge readers (backlog, readiness, restarts)."""

    def __init__(self, ledger_path: Path, clock, *, gauges: Mapping[str, Callable[[str | None], float | None]]
                 | None = None):
        self.path = Path(ledger_path)
        self.clock = clock
        self.gauges = dict(gauges or {})
        self._rows: list[LedgerRow] = []
        self._offset = 0
        self._lock = threading.Lock()

    def _refresh(self) -> list[LedgerRow]:
        with self._lock:
            new, self._offset = read_ledger(self.path, self._offset)
            self._rows.extend(new)
            return list(self._rows)

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        if query not in SLI_NAMES:
            raise ValueError(f"unknown SLI {query!r}; known: {', '.join(SLI_NAMES)}")
        labels = dict(labels or {})
        now = self.clock.now()
        t0 = now - max(float(window), 0.0)
        if query in ("backlog", "ready_replicas", "restarts"):
            reader = self.gauges.get(query)
            value = reader(labels.get("component")) if reader else None
            return [Sample(t0, now, value, labels, 1 if value is not None else 0)]
        rows = [r for r in self._refresh() if t0 <= r["t"] < now
                and (labels.get("driver") is None or r["driver"] == labels["driver"])
                and (labels.get("phase") is None or r.phase == labels["phase"])]
        return [self._sample(query, a, b, rs, {**labels, **lab}) for a, b, lab, rs in self._spans(rows, t0, now, step)]

    def _spans(self, rows: list[LedgerRow], t0: float, t1: float, step: float | None):
        if step is not None:
            out, a = [], t0
            while a < t1 - 1e-9:
                b = min(t1, a + step)
                out.append((a, b, {}, [r for r in rows if a <= r["t"] < b]))
                a = b
            return out
        segs: dict[str, list] = {}
        for r in rows:
            seg = segs.setdefault(r["phase"], [r["t"], r["t"], {"phase": r.phase, "cycle": r.cycle}, []])
            seg[0], seg[1] = min(seg[0], r["t"]), max(seg[1], r["t"])
            seg[3].append(r)
        return [tuple(s) for s in sorted(segs.values(), key=lambda s: s[0])]

    def _sample(self, query: str, a: float, b: float, rows: list[LedgerRow], labels: dict) -> Sample:
        base = [r for r in rows if not r["dropped"]]
        n = len(base)
        value: float | None
        if query == "error_ratio":
            value = sum(1 for r in base if r["timeout"] or not r["ok"]) / n if n else None
        elif query == "goodput":
            value = sum(1 for r in base if r["ok"] and r["correct"]) / n if n else None
        elif query == "offered_rps":
            value = len(rows) / (b - a) if b > a else None
        elif query == "conn_errors":
            value = float(sum(1 for r in base if r["detail"].startswith("connect:") or "pool_timeout" in r["detail"]))
        else:
            value = _nearest_rank([r["latency_ms"] for r in base if r["latency_ms"] is not None], _PCT[query])
        return Sample(a, b, None if value is None else round(value, 6), labels, n)
