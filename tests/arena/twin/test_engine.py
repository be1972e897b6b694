"""The twin's core: the load schedule, the pool mechanism, layered state, and the shell's parsing."""

from __future__ import annotations

import pytest

from arena.twin.load import LoadProfile, LoadSchedule
from arena.twin.mech import ERROR, OK, ConnectionPool, Mode, chain, finish
from arena.twin.shell import Shell
from arena.twin.state import UNSET, SessionCohorts, SettingTable


def test_schedule_phases_prehistory_warmup_and_alignment():
    s = LoadSchedule(LoadProfile(prehistory_cycles=2))
    assert s.start == -120
    assert (s.phase_at(-120).name, s.phase_at(-120).cycle) == ("peak", -2)
    assert s.phase_at(10).name == "warmup"
    ph = s.phase_at(95)
    assert (ph.name, ph.cycle, ph.rps, ph.start, ph.end) == ("peak", 2, 50, 90, 110)
    # Every soak starts at the first cycle boundary (a peak start) at or after the freeze, as Incident-Arena's
    # runner does; the legacy align_soak_to_cycle marker changes nothing.
    assert s.soak_window(100) == (150, 270)
    assert s.soak_window(90) == (90, 210)  # a freeze on a boundary starts the soak there
    assert s.soak_window(10) == (30, 150)  # never before the warmup ends
    marked = LoadSchedule(LoadProfile(align_soak_to_cycle=True, soak_cycles=3))
    assert marked.soak_window(100) == (150, 330)


def test_schedule_with_several_cycle_shapes():
    p = LoadProfile(warmup_s=0, cycles=[[14, 6, 34, 1.4], [9, 7.5, 41, 0.9]], prehistory_cycles=0)
    s = LoadSchedule(p)
    assert s.phase_at(13.9).rps == 6 and s.phase_at(14).rps == 1.4
    assert s.phase_at(48).rps == 7.5 and s.phase_at(48).cycle == 2
    assert s.phase_at(98).rps == 6 and s.phase_at(98).cycle == 3
    assert s.cycle_start_at_or_after(20) == 48


def test_an_action_mix_gives_each_driver_its_weight_over_the_sum():
    p = LoadProfile(action_weights={"session_history": 6.0, "session_post": 3.0, "session_login": 1.0},
                    drivers=[{"name": "session_post", "timeout_s": 9}])
    shares = {d.name: d.rate_scale for d in p.drivers}
    assert shares == pytest.approx({"session_history": 0.6, "session_post": 0.3, "session_login": 0.1})
    assert next(d for d in p.drivers if d.name == "session_post").timeout_s == 9
    assert p.action_seed == p.seed and LoadProfile(behavior_seed=5801).action_seed == 5801


@pytest.mark.parametrize("bad", [
    {"action_weights": {"session_post": 1.0}, "drivers": [{"name": "session_post", "rate_scale": 0.5}]},
    {"action_weights": {"session_post": 1.0}, "drivers": [{"name": "write_readback"}]},
    {"action_weights": {"session_post": 0.0}},
    {"action_weights": {}},
    {"rate_jitter": 1.5},
])
def test_a_mix_that_contradicts_itself_is_refused(bad):
    with pytest.raises(ValueError):
        LoadProfile(**bad)


def test_rate_jitter_draws_one_seeded_factor_per_phase_and_the_baseline_floors_it():
    p = LoadProfile(warmup_s=30, warmup_rps=35, cycles=[[30, 90, 30, 25]], rate_jitter=0.2, noise_seed=5802,
                    baseline_rps=20, prehistory_cycles=0)
    s = LoadSchedule(p)
    peaks = [s.phase_at(30 + 60 * k + 1).rps for k in range(20)]
    troughs = [s.phase_at(60 + 60 * k + 1).rps for k in range(20)]
    assert all(72 <= r <= 108 for r in peaks) and len(set(peaks)) == 20  # no two cycles alike
    assert all(20 <= r <= 30 for r in troughs)
    floored = LoadSchedule(p.model_copy(update={"baseline_rps": 24}))
    low = [floored.phase_at(60 + 60 * k + 1).rps for k in range(20)]
    assert min(low) == 24 and [max(r, 24) for r in troughs] == low  # the floor lifts only the phases below it
    # One phase, one rate: asked at its start, its end or out of order, and by a fresh schedule.
    assert s.phase_at(59.9).rps == s.phase_at(30).rps == LoadSchedule(p).phase_at(45).rps
    assert LoadSchedule(p.model_copy(update={"noise_seed": 1})).phase_at(31).rps != peaks[0]
    assert LoadSchedule(p.model_copy(update={"rate_jitter": 0.0})).phase_at(31).rps == 90


def test_pool_queues_below_saturation_and_times_out_above():
    pool = ConnectionPool(3, 2, 2.0)
    light = pool.offer(rps=5, hold_ms=10)
    assert light.served == pytest.approx(1.0) and light.wait_ms < 1
    heavy = pool.offer(rps=50, hold_ms=360)  # 18 connections wanted, 5 exist
    assert heavy.served == pytest.approx(5 / 18 * 0.98)
    modes = heavy.modes(360, "authz_unavailable")
    assert modes[1].status == ERROR and modes[1].latency_ms == 2000 and modes[1].conn
    bigger = ConnectionPool(20, 10, 2.0).offer(rps=50, hold_ms=360)
    assert bigger.served > 0.999


def test_modes_chain_and_client_timeout():
    a = [Mode(0.8, 10.0), Mode(0.2, 5.0, ERROR, "boom")]
    b = [Mode(0.5, 100.0), Mode(0.5, 7000.0)]
    out = chain(a, b)
    assert sum(m.weight for m in out) == pytest.approx(1.0)
    assert {(m.status, m.latency_ms) for m in out} == {(OK, 110.0), (OK, 7010.0), (ERROR, 5.0)}
    done = finish(out, timeout_s=5)
    assert {m.status for m in done} == {OK, ERROR, "timeout"}


def test_layers_and_session_cohorts():
    t = SettingTable()
    t.declare("maxmemory", "64mb")
    t.set_runtime("maxmemory", "2mb")
    assert t.get("maxmemory") == "2mb" and t.layered("maxmemory").layer == "runtime"
    t.drop_runtime()
    assert t.get("maxmemory") == "64mb" and t.layered("maxmemory").runtime is UNSET
    pool = SessionCohorts()
    pool.open(8, {"statement_timeout": "0"}, 0.0)
    pool.open(4, {"statement_timeout": "150ms"}, 10.0)
    assert pool.share("statement_timeout", "150ms") == pytest.approx(1 / 3)
    assert pool.terminate({"statement_timeout": "150ms"}) == 4 and pool.size == 8


@pytest.fixture()
def shell():
    spent = []
    sh = Shell(spent.append, {"DB": "postgres://x"})
    sh.register("echo", lambda inv: (" ".join(inv.argv[1:]) + "\n", "", 0, 0.0))
    sh.register("cat", lambda inv: (inv.stdin, "", 0, 0.0))
    sh.register("upper", lambda inv: (inv.stdin.upper(), "", 0, 0.5))
    sh.register("false", lambda inv: ("", "", 1, 0.0))
    sh.spent = spent  # type: ignore[attr-defined]
    return sh


def test_shell_pipes_sequences_heredocs_and_variables(shell):
    assert shell.run("echo hi | upper").stdout == "HI\n"
    assert shell.run("false && echo no; echo yes").stdout == "yes\n"
    assert shell.run("false || echo fallback").stdout == "fallback\n"
    assert shell.run("echo \"$DB\" '$DB'").stdout == "postgres://x $DB\n"
    assert shell.run("X=1 echo ok").stdout == "ok\n"
    assert shell.run("cat <<'EOF'\nline 1\nline 2\nEOF").stdout == "line 1\nline 2\n"
    assert shell.run("echo quiet > /dev/null 2>&1 && echo loud").stdout == "loud\n"
    r = shell.run("nope 2>/dev/null || echo missing")
    assert (r.stdout, r.stderr, r.exit_code) == ("missing\n", "", 0)
    assert shell.run("nope 2>&1").stdout == "bash: nope: command not found\n"
    assert shell.run("echo a | upper").duration_s == 0.5 and shell.spent == [0.5, 0.5]


def test_shell_rejects_what_it_does_not_model(shell):
    assert shell.run("echo $(whoami)").exit_code == 2
    r = shell.run("echo hi > /tmp/x")
    assert r.exit_code == 1 and "redirection" in r.stderr
    assert shell.run("| echo").exit_code == 2
    r = shell.run("nope")
    assert r.exit_code == 127 and r.stderr == "bash: nope: command not found\n"
