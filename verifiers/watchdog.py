"""The loop watchdog: catches an agent stuck diagnosing, and a repair that fixed a symptom only.

Run by the Guard after every step (a step check). It reads the journal (what ran, what it printed) and, cheaply,
the SLIs (one measurement, no waiting). Two findings, each reported once per episode of the pattern:

- LOOP_DETECTED: the same read-only commands repeated, or N steps with no mutating action while the SLIs stay
  out of band. The message summarises what was learned: each distinct command, how often, what it showed.
- RESIDUAL_CAUSE: the SLIs recovered after the last change and then regressed with no further change (a
  symptom-only repair), or the restart probe found the fault re-armed by a restart.

`detect_loop` and `detect_relapse` are the pure judges; `LoopWatchdog` gathers their inputs. It reads the journal
incrementally (`StepLog`): each step costs the same however long the session has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from verifiers.base import VerifierBase, is_mutating_action, last_mutation_t
from verifiers.context import PublicContext
from verifiers.convergence import Assessment, ConvergenceCheck, assess
from verifiers.criteria import Criteria, WatchdogCriteria
from verifiers.protocols import Environment, FeedbackCode, Verdict, VerdictStatus

__all__ = ["StepView", "detect_loop", "detect_relapse", "LoopWatchdog"]


@dataclass(frozen=True)
class StepView:
    """One executed command as the watchdog sees it."""

    seq: int
    command: str
    mutating: bool
    exit_code: int | None = None
    showed: str = ""


def _norm(cmd: str) -> str:
    return " ".join(cmd.split())


def steps_of(journal: Any) -> list[StepView]:
    outputs: dict[int, Mapping[str, Any]] = {}
    for r in journal.records():
        if r.get("kind") == "result" and r.get("ref") is not None:
            outputs[int(r["ref"])] = r
    return [_step(e, outputs.get(int(e.get("seq") or 0), e)) for e in journal.executed()]


def _step(command: Mapping[str, Any], result: Mapping[str, Any]) -> StepView:
    text = str(result.get("stdout_head") or result.get("stdout") or result.get("stderr_head") or "")
    # The first two lines: a table's header alone says little, its first row says what was seen.
    first = " / ".join([ln.strip() for ln in text.splitlines() if ln.strip()][:2])
    actions = command.get("actions") or ()
    # A command with no recognised action is opaque to us; like the guard, count it as mutating.
    mutating = any(is_mutating_action(a) for a in actions) if actions else True
    return StepView(int(command.get("seq") or 0), _norm(str(command.get("command") or "")), mutating,
                    result.get("exit_code"), " ".join(first.split())[:160])


class StepLog:
    """What the watchdog has read of one journal so far: the steps since the last change, counts, new verdicts."""

    def __init__(self) -> None:
        self.journal_id: int | None = None
        self.last_seq = 0  # the newest record read
        self.n_steps = 0
        self.last_step_seq = 0
        self.idle: list[StepView] = []  # the trailing run of read-only steps
        self.last_mutation_t: float | None = None  # as verifiers.base.last_mutation_t
        self._awaiting: dict[int, Mapping[str, Any]] = {}  # commands that ran, until their result

    def update(self, journal: Any) -> list[Mapping[str, Any]]:
        """Read the records added since the last call; returns them."""
        if self.journal_id != id(journal):
            self.__init__()
            self.journal_id = id(journal)
        since = getattr(journal, "since", None)
        new = list(since(self.last_seq)) if since is not None else [
            r for r in journal.records() if int(r.get("seq") or 0) > self.last_seq]
        for r in new:
            self.last_seq = max(self.last_seq, int(r.get("seq") or 0))
            kind = r.get("kind")
            if kind == "command" and r.get("ran"):
                self._awaiting[int(r.get("seq") or 0)] = r
            elif kind == "result" and r.get("ref") is not None:
                cmd = self._awaiting.pop(int(r["ref"]), None)
                if cmd is None:
                    continue
                if int(cmd.get("seq") or 0) < self.last_step_seq:
                    self._rebuild(journal)  # a result out of command order: recount from the whole journal
                    continue
                self._add(_step(cmd, r), cmd, r)
        return new

    def _add(self, step: StepView, cmd: Mapping[str, Any], res: Mapping[str, Any]) -> None:
        self.n_steps += 1
        self.last_step_seq = step.seq
        if step.mutating:
            self.idle = []
        else:
            self.idle.append(step)
        t = res.get("t", cmd.get("t"))
        if t is not None and any(is_mutating_action(a) for a in cmd.get("actions") or ()):
            self.last_mutation_t = float(t) if self.last_mutation_t is None else max(self.last_mutation_t, float(t))

    def _rebuild(self, journal: Any) -> None:
        steps = steps_of(journal)
        self.n_steps = len(steps)
        self.last_step_seq = steps[-1].seq if steps else 0
        idle: list[StepView] = []
        for st in reversed(steps):
            if st.mutating:
                break
            idle.append(st)
        self.idle = idle[::-1]
        self.last_mutation_t = last_mutation_t(journal)


def summary(steps: Sequence[StepView]) -> list[dict[str, Any]]:
    """Each distinct command, how often it ran, and what it last showed."""
    seen: dict[str, dict[str, Any]] = {}
    for s in steps:
        d = seen.setdefault(s.command, {"command": s.command, "times": 0, "showed": "", "exit_code": None})
        d["times"] += 1
        d["showed"], d["exit_code"] = s.showed, s.exit_code
    return sorted(seen.values(), key=lambda d: -d["times"])


def detect_loop(steps: Sequence[StepView], crit: WatchdogCriteria, *, slis_out_of_band: bool | None = None,
                sli_detail: str = "") -> dict[str, Any] | None:
    """A diagnostic loop in the trailing run of read-only steps, or None. Pure."""
    idle: list[StepView] = []
    for s in reversed(steps):
        if s.mutating:
            break
        idle.append(s)
    idle.reverse()
    window = idle[-crit.window_steps:]
    if not window:
        return None
    learned = summary(window)
    top = learned[0]
    reason = None
    if top["times"] >= crit.repeat_limit:
        reason = f"`{top['command']}` ran {top['times']} times in the last {len(window)} steps with no change"
    elif len(window) >= crit.window_steps and len(learned) / len(window) <= crit.max_distinct_ratio:
        reason = f"the last {len(window)} steps cycled through only {len(learned)} read-only commands"
    elif len(idle) >= crit.idle_steps and slis_out_of_band:
        reason = f"{len(idle)} steps without any change while the SLIs stay out of band ({sli_detail})"
    if reason is None:
        return None
    return {"reason": reason, "idle_steps": len(idle), "learned": learned, "since_seq": idle[0].seq}


def detect_relapse(a: Assessment) -> dict[str, Any] | None:
    """SLIs that recovered after the last change and then regressed without another change, or None. Pure."""
    states = [c.state for c in a.cycles]
    first_ok = next((i for i, s in enumerate(states) if s == "ok"), None)
    if first_ok is None:
        return None
    later_fail = next((i for i in range(first_ok + 1, len(states)) if states[i] == "fail"), None)
    if later_fail is None or a.cycles[later_fail].draining:
        return None
    bad = a.cycles[later_fail]
    return {"recovered_cycle": a.cycles[first_ok].cycle, "regressed_cycle": bad.cycle,
            "regressed": [{"sli": r.band.label(), "value": r.value, "band": r.band.describe()} for r in bad.failures]}


class LoopWatchdog(VerifierBase):
    """Per-step watchdog: LOOP_DETECTED for a diagnostic loop, RESIDUAL_CAUSE for a symptom-only repair."""

    name = "watchdog"

    def __init__(self, context: Any = None):
        self.context = PublicContext.of(context)
        self.conv = ConvergenceCheck(self.context)
        self._bands: list | None = None
        self._reported: set[Any] = set()
        self._loop_fired: tuple[int, int] | None = None  # (last seq, step count) when last reported
        self._log = StepLog()
        self._rearmed: list[tuple[Any, Mapping[str, Any]]] = []  # restart-probe findings not yet reported

    def _assessment(self, env: Environment, journal: Any, crit: Criteria,
                    last: float | None = None) -> Assessment | None:
        cc = crit.convergence
        if self._bands is None:
            self._bands, _ = self.conv.bands(env, cc)
        if not any(b.source in ("slo", "baseline") for b in self._bands):
            return None
        cycle_s = self.conv.cycle_s(env, cc)
        now = env.clock.now()
        start = last if last is not None else now - 3 * cycle_s
        start = max(start, now - 8 * cycle_s)  # bounded look-back keeps a step cheap
        series = self.conv.measure(env, self._bands, start, cycle_s)
        return assess(series, self._bands, cc, window_start=start, now=now, cycle_s=cycle_s)

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        crit = Criteria.coerce(criteria)
        wc = crit.watchdog
        log = self._log
        for r in log.update(journal):
            if r.get("kind") == "verdict":
                found = _rearmed(r)
                if found is not None:
                    self._rearmed.append((r.get("seq"), found))
        # The restart probe found the fault re-armed by a restart: the cause is still in place.
        while self._rearmed:
            seq, found = self._rearmed.pop(0)
            if seq in self._reported:
                continue
            self._reported.add(seq)
            return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.RESIDUAL_CAUSE, (
                "the restart probe brought the fault back: the repair removed a symptom, not the cause. "
                "Find what re-creates the fault at start-up (a boot-time job, an image setting, a "
                "declared value) and fix it there."), {"restart_probe": found})
        a: Assessment | None = None
        # The SLIs matter only to a relapse (after a change) or to a long idle run (detect_loop's out-of-band
        # rule); skipping the measurement otherwise gives the same verdict without the per-step SLI reads.
        changed = log.last_mutation_t is not None
        if wc.check_slis and (changed or len(log.idle) >= wc.idle_steps):
            try:
                a = self._assessment(env, journal, crit, log.last_mutation_t)
            except Exception:  # noqa: BLE001 - without SLIs the watchdog still judges the journal
                a = None
        # A relapse is judged after the agent's last change only: before any change, "healthy, then not" is just
        # the incident starting.
        if a is not None and changed:
            relapse = detect_relapse(a)
            key = ("relapse", a.window_start, relapse and relapse["regressed_cycle"])
            if relapse and key not in self._reported:
                self._reported.add(key)
                what = "; ".join(f"{x['sli']} = {x['value']:.4g} (band {x['band']})" for x in relapse["regressed"])
                return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.RESIDUAL_CAUSE, (
                    f"the SLIs recovered after your last change (cycle {relapse['recovered_cycle']}) and regressed "
                    f"without another change (cycle {relapse['regressed_cycle']}): {what}. The change treated a "
                    f"symptom; look for the cause that is still in place."), relapse)
        out_of_band = None
        detail = ""
        if a is not None and a.cycles:
            out_of_band = a.cycles[-1].state == "fail"
            detail = "; ".join(f"{r.band.label()} = {r.value:.4g}" for r in a.cycles[-1].failures[:3])
        # The trailing read-only run is all detect_loop looks at; the step count and last seq stand for the rest.
        loop = detect_loop(log.idle, wc, slis_out_of_band=out_of_band, sli_detail=detail)
        if loop is None:
            return Verdict(VerdictStatus.PASS, self.name, message="no loop")
        if self._loop_fired is not None:
            fired_seq, fired_n = self._loop_fired
            same_run = loop["since_seq"] <= fired_seq
            if same_run and log.n_steps - fired_n < wc.window_steps:
                return Verdict(VerdictStatus.PASS, self.name, message="loop already reported", evidence=loop)
        self._loop_fired = (log.last_step_seq, log.n_steps)
        learned = "; ".join(f"`{d['command']}` x{d['times']} showed {d['showed']!r}" for d in loop["learned"][:6])
        return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.LOOP_DETECTED, (
            f"diagnostic loop: {loop['reason']}. What you have learned so far: {learned}. Act on it: make the "
            f"change these readings point to, or read something you have not read yet."), loop)


def _rearmed(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A restart-probe verdict (at any depth) that says the fault came back on restart."""
    stack = [record]
    while stack:
        v = stack.pop()
        if v.get("code") == FeedbackCode.RESTART_REGRESSION.value and (v.get("evidence") or {}).get("fault_rearmed"):
            return {"verifier": v.get("verifier"), "message": v.get("message")}
        stack.extend(v.get("children") or ())
    return None
