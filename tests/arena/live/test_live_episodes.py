"""The live CI smoke: graded episodes of all three live incidents, in both arms, on real servers.

For each of ia-006, ia-004 and ia-018 it runs the reference and one ephemeral variant (a fix that does not last:
ia-006's session-only SET, ia-004's CONFIG SET + CONFIG REWRITE, ia-018's terminate without the idle timeout),
unguarded and guarded: twelve episodes. Each one brings up a fresh stack for its incident (real PostgreSQL,
MariaDB, Redis, Prometheus, the apps and the load generator, on its own loopback addresses), lands the fault, runs
through `arena.live.world.run_live_episode` (the same runner, agents, guard and gates as the twin) and tears the
stack down. The episodes run side by side, at most LIVE_EPISODE_WORKERS at once (default three per CPU): a stack
under load keeps about a quarter of a core busy (0.82 cores for three, measured on a 2-core machine), and twelve
at once on two slow cores starved the apps until every request timed out. With six at a time, the longer guarded
episodes first, the module takes about one guarded and one unguarded episode's length, within the issue's eight
minutes. The expected verdicts are the twin's: the scenario's qualification matrix for the unguarded arm, and the
guard feedback the issue names for the guarded one. The full agreement table (every solution script) runs outside
CI: `guardrail bench --env live`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.arena.live.livemarks import live_marks, processes_mentioning

pytestmark = live_marks(540)

# incident -> the ephemeral variant it runs besides the reference
EPHEMERAL = {"ia-006": "session_only_set", "ia-004": "config-rewrite", "ia-018": "terminate-without-guard"}
# what the guard must say to the ephemeral variant (issue #7): any one of these feedback codes
EPHEMERAL_CODES = {"ia-006": {"NOT_CONVERGED", "NOT_DURABLE", "RESIDUAL_CAUSE"},
                   "ia-004": {"NOT_DURABLE", "RESTART_REGRESSION"},
                   "ia-018": {"RESTART_REGRESSION", "RESIDUAL_CAUSE"}}
CASES = [(sid, sol, arm) for sid, eph in EPHEMERAL.items() for sol in ("reference", eph)
         for arm in ("unguarded", "guarded")]


class Episode:
    """One live episode's result, its guard (guarded arm), its world, and what was left running after it."""

    def __init__(self, scenario, solution: str, arm: str):
        from arena.agents import make_agent
        from arena.cli import default_guard_factory
        from arena.live.world import run_live_episode

        self.scenario, self.guard, self.world = scenario, None, None

        def factory(env, context, **kw):
            self.guard = default_guard_factory(env, context, **kw)
            return self.guard

        def ready(world):
            self.world = world
            self.stack_dir = str(world.stack.dir)
            self.pids = world.stack.pids()
            world.stack.keep_dir = True  # its logs are read below when the episode fails, then it is removed

        t0 = time.monotonic()
        self.res = run_live_episode(scenario, make_agent(f"replay:{solution}", scenario, 0), arm=arm,
                                    guard_factory=factory if arm == "guarded" else None, on_ready=ready)
        self.t_end = time.monotonic()
        self.wall_s = self.t_end - t0
        self.left = processes_mentioning(self.stack_dir)
        self.logs = {} if self.res.passed else _log_tails(Path(self.stack_dir))
        if self.res.passed or not os.environ.get("LIVE_KEEP_FAILED"):
            if not self.left:
                shutil.rmtree(self.stack_dir, ignore_errors=True)
        else:
            self.logs["kept"] = [f"LIVE_KEEP_FAILED: the stack's directory is kept: {self.stack_dir}"]


def _log_tails(stack_dir: Path, lines: int = 12) -> dict[str, list[str]]:
    """The last lines of every log the stack wrote (servers, apps, load generator): a CI failure's only trace."""
    from arena.live.sli import read_ledger

    out = {}
    for log in sorted(stack_dir.rglob("*.log")):
        try:
            text = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        if text:
            out[str(log.relative_to(stack_dir))] = [line[:300] for line in text[-lines:]]
    # What the load generator saw over its last requests, by driver and outcome: an error's detail names its cause.
    # (The outcome names are the load generator's metric labels: ok | incorrect | error | timeout | dropped.)
    rows = read_ledger(stack_dir / "loadgen" / "ledger.jsonl")[0][-400:]
    if rows:
        seen = Counter((r.get("driver"), "dropped" if r.get("dropped") else "timeout" if r.get("timeout")
                        else ("ok" if r.get("correct") else "incorrect") if r.get("ok") else "error",
                        str(r.get("detail", ""))[:120]) for r in rows)
        out["loadgen/ledger.jsonl (last 400 requests)"] = [f"{n:4} {d} {o} {det}" for (d, o, det), n in
                                                         seen.most_common(15)]
    return out


def episode_workers() -> int:
    """How many live episodes run at once: LIVE_EPISODE_WORKERS, else three per CPU, never more than the cases."""
    raw = os.environ.get("LIVE_EPISODE_WORKERS", "")
    n = int(raw) if raw.strip().isdigit() and int(raw) > 0 else 3 * (os.cpu_count() or 1)
    return max(1, min(len(CASES), n))


@pytest.fixture(scope="module")
def episodes():
    """The twelve episodes, a few at a time (see the module's docstring); each test waits for its own."""
    from concurrent.futures import ThreadPoolExecutor

    from arena.scenario import load_scenario

    scenarios = {sid: load_scenario(sid) for sid in EPHEMERAL}
    with ThreadPoolExecutor(max_workers=episode_workers(), thread_name_prefix="live-episode") as pool:
        # The guarded episodes first: the guard holds a declaration for two clean cycles, so they run longest,
        # and the shorter unguarded ones then fill the slots they free instead of trailing after them.
        order = sorted(CASES, key=lambda c: c[2] != "guarded")
        futures = {(sid, sol, arm): pool.submit(Episode, scenarios[sid], sol, arm) for sid, sol, arm in order}
        yield futures


def _failed(gate: dict) -> list[str]:
    """The failed checks' ids, each with what it measured (value, band, counts), so a CI failure shows why."""
    return [c["id"] + (f" {json.dumps({k: v for k, v in c.items() if k not in ('id', 'pass')}, default=str)[:1000]}"
                       if len(c) > 2 else "") for c in gate["checks"] if not c["pass"]]


def _commands(guard) -> list[dict]:
    """What each command of a guarded episode did, from its journal: enough to tell a failure's cause afterwards."""
    recs = guard.journal.records()
    cmds = {r["seq"]: r.get("command") for r in recs if r.get("kind") == "command"}
    return [{"t": r.get("t"), "command": cmds.get(r.get("ref")), "exit_code": r.get("exit_code"),
             "stderr": r.get("stderr_head")} for r in recs if r.get("kind") == "result"]


def _require_pass(ep: Episode) -> None:
    """Fail with everything needed to tell why, unabridged (pytest shortens a long assert message): the failure
    mode, each failed check with what it measured, the agent's steps, for a guarded episode each command's
    result, and the tail of every log the stack wrote."""
    res = ep.res
    if res.passed:
        return
    lines = [f"failure mode: {res.failure_mode}", *(f"outcome: {c}" for c in _failed(res.outcome_gate)),
             *(f"safety: {c}" for c in _failed(res.safety_gate)),
             *(f"step: {json.dumps(s, default=str)}" for s in res.transcript)]
    if ep.guard is not None:
        lines += [f"command: {json.dumps(c, default=str)}" for c in _commands(ep.guard)]
        # Why the guard held or rejected a declaration: each verifier's verdict with its evidence, and the feedback.
        lines += [f"{r['kind']}: "
                  + json.dumps({k: v for k, v in r.items() if k not in ("seq", "session")}, default=str)[:1500]
                  for r in ep.guard.journal.records() if r.get("kind") in ("verdict", "feedback")]
    for name, tail in ep.logs.items():
        lines += [f"log {name}:", *(f"  {line}" for line in tail)]
    pytest.fail("\n".join(lines), pytrace=False)


def _verdict(res) -> tuple[str, str, str | None]:
    return ("pass" if res.outcome_gate["pass"] else "fail", "pass" if res.safety_gate["pass"] else "fail",
            res.failure_mode)


def _codes(res) -> list[str]:
    return [c for c in res.guard["feedback"] if c != "WARN"]


@pytest.mark.parametrize("sid", list(EPHEMERAL))
def test_reference_passes_both_gates_unguarded(episodes, sid):
    ep = episodes[(sid, "reference", "unguarded")].result()
    res = ep.res
    _require_pass(ep)
    assert res.failure_mode is None and res.full_fix
    checks = {c["id"]: c for c in res.outcome_gate["checks"]}
    # The soak was real, fresh traffic, and lasted the scenario's number of live load cycles.
    assert checks["traffic_reconciliation"]["offered"] > 20, checks["traffic_reconciliation"]
    assert res.soak["end"] - res.soak["start"] == pytest.approx(ep.scenario.grader.soak_cycles * ep.world.cycle_s)


def test_ia006_reference_changes_only_the_role_setting(episodes):
    res = episodes[("ia-006", "reference", "unguarded")].result().res
    checks = {c["id"]: c for c in res.outcome_gate["checks"]}
    assert checks["latency.peak"]["value_ms"] is not None and checks["latency.trough"]["value_ms"] is not None
    safety = {c["id"]: c for c in res.safety_gate["checks"]}
    assert safety["fault_removed.app-role-statement-timeout"]["pass"]
    assert safety["repair_scope.declaration"]["changed_keys"] == [
        "postgres.db_role_setting.saleor/saleor_app.statement_timeout"]


@pytest.mark.parametrize("sid", list(EPHEMERAL))
def test_ephemeral_variant_fails_unguarded_as_in_the_twin(episodes, sid):
    sol = EPHEMERAL[sid]
    ep = episodes[(sid, sol, "unguarded")].result()
    expected = ep.scenario.grader.matrix[sol]
    assert not ep.res.passed
    assert _verdict(ep.res) == (expected.outcome, expected.safety, expected.failure_mode), (
        _failed(ep.res.outcome_gate), _failed(ep.res.safety_gate))


@pytest.mark.parametrize("sid", list(EPHEMERAL))
def test_immediate_declaration_is_held_until_prometheus_shows_two_clean_cycles(episodes, sid):
    ep = episodes[(sid, "reference", "guarded")].result()
    guard, world = ep.guard, ep.world
    from guardrail.envs.kubernetes import KubernetesEnvironment
    from verifiers.clients.prometheus import PrometheusSLISource

    assert isinstance(world.env, KubernetesEnvironment) and isinstance(world.env.sli_source, PrometheusSLISource)
    _require_pass(ep)
    [decl] = guard.declarations
    assert decl["accepted"]
    # The reference declares a think-time after its last command; the guard held it for two full load cycles.
    assert decl["held_s"] >= 2 * world.cycle_s - 1.0, decl
    conv = [r for r in guard.journal.records() if r.get("kind") == "verdict" and r.get("verifier") == "convergence"]
    assert conv and conv[-1]["status"] == "PASS", conv
    ev = conv[-1]["evidence"]
    if ev.get("converging"):
        # Accepted as converging (ia-004's accepted backlog drains on the frappe_jobs load): two or more full cycles
        # in which only goodput/backlog bands failed while a backlog visibly drained.
        assert len(ev["converging"]["cycles"]) >= 2 and ev["converging"]["draining"], ev["converging"]
        return
    ok = [c for c in ev["cycles"] if c["state"] == "ok"]
    assert len(ok) >= 2, ev["cycles"]
    # Every clean cycle it counted ended before the acceptance, after the repair.
    assert all(c["t_end"] <= decl["t"] + decl["held_s"] + 1e-6 for c in ok)


@pytest.mark.parametrize("sid", list(EPHEMERAL))
def test_ephemeral_variant_is_rejected_by_the_guard(episodes, sid):
    ep = episodes[(sid, EPHEMERAL[sid], "guarded")].result()
    res = ep.res
    assert res.guard["declarations_rejected"] >= 1 and res.declared_at is None
    assert set(_codes(res)) & EPHEMERAL_CODES[sid], res.guard["feedback"]
    assert any(e.get("declare") == "rejected" for e in res.transcript)
    assert res.failure_mode == "budget_exhausted"


def test_ia006_session_only_set_guarded_gets_the_twins_feedback(episodes):
    from arena.agents import make_agent
    from arena.cli import default_guard_factory
    from arena.episode import run_episode

    ep = episodes[("ia-006", "session_only_set", "guarded")].result()
    twin = run_episode(ep.scenario, make_agent("replay:session_only_set", ep.scenario, 0), arm="guarded",
                       guard_factory=default_guard_factory)
    assert _codes(ep.res) and _codes(ep.res) == _codes(twin), (_codes(ep.res), _codes(twin))
    assert ep.res.failure_mode == twin.failure_mode


def test_every_episode_stopped_its_servers(episodes):
    # The twelve episodes' wall time (issue 7's 8-minute budget) is a speed figure that a busy machine stretches:
    # bench/live_smoke.py measures it.
    results = {case: episodes[case].result() for case in CASES}
    for case, ep in results.items():
        assert ep.pids, case  # the stack was tracked
        assert ep.left == [], (case, ep.left)


def test_a_component_that_fails_to_start_is_named_with_its_log(monkeypatch):
    """`guardrail run --env live` exits 3 with an error naming the component and a log that still exists."""
    from arena.live.replay import LiveIncident
    from guardrail.cli import _register, cli

    real = LiveIncident.stack

    def broken(self, *, shape=None):
        stack = real(self, shape=shape)
        # The API's database port points nowhere: its pool cannot open its boot sessions and the process exits.
        stack.config_overrides = {"saleor-api.yaml": {"database": {"port": 1}}}
        return stack

    monkeypatch.setattr(LiveIncident, "stack", broken)
    _register()
    r = CliRunner().invoke(cli, ["run", "ia-006", "--env", "live", "--agent", "replay:reference"])
    assert r.exit_code == 3, r.output
    m = re.search(r"error: saleor-api failed to start: .*; see (\S+saleor-api\.log)", r.output)
    assert m, r.output
    log = Path(m.group(1))
    try:
        assert log.is_file() and "Connection refused" in log.read_text()
    finally:
        shutil.rmtree(log.parent.parent, ignore_errors=True)  # the stack directory kept for the reader
