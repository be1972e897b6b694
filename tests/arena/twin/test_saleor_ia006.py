"""ia-006 on the Saleor twin: the fault, the fixes and the naive variants, judged from the load ledger and world
state (the mechanisms), independent of the gates. The gates' verdicts per script are test_qualification's job."""

from __future__ import annotations

import json

import pytest

from arena.agents import resolve_agent
from arena.episode import run_episode
from arena.scenario import load_scenario
from arena.twin.engine import build_twin
from arena.twin.saleor.postgres import PostgresServer

SC = load_scenario("ia-006")
BANDS = SC.grader.bands
ERR_MAX = BANDS.by_driver["checkout_readback"].error_rate_max * SC.grader.ceiling_tolerance


def replay(name: str, seed: int = 1, think_s: float = 5.0):
    """Run a solution script up to its declaration, then the soak; returns (env, declared_at, soak window)."""
    env = build_twin(SC.twin, seed=seed)
    for step in SC.solutions[name].script:
        env.clock.sleep(think_s)
        if step.run:
            env.run(step.run)
        elif step.sleep:
            env.clock.sleep(step.sleep)
        elif step.declare:
            break
    t = env.clock.now()
    env.world.declare(t)
    truth = env.world.truth()
    s0, s1 = env.world.schedule.soak_window(t)
    env.clock.sleep(s1 - env.clock.now())
    return env, truth, (s0, s1)


def checkout(env, t0, t1, phase=None):
    c, _ = env.world.ledger.select(t0, t1, driver="checkout_readback", phase=phase)
    return c.error_rate()


def test_fault_fails_checkouts_at_peaks_while_browse_and_troughs_look_healthy():
    env = build_twin(SC.twin, seed=3)
    pre_peak = checkout(env, -400, 0, "peak")
    env.clock.sleep(600)
    peak, trough = checkout(env, 30, 600, "peak"), checkout(env, 30, 600, "trough")
    browse, _ = env.world.ledger.select(30, 600, driver="browse")
    assert pre_peak == 0.0
    assert peak > 0.25 and trough < peak / 3
    assert browse.error_rate() < 0.01
    logs = env.run("kubectl -n saleor logs postgres-0 --tail=5").stdout
    assert "canceling statement due to statement timeout" in logs


@pytest.mark.parametrize("name", ["reference", "alt_zero", "alt_above_probe"])
def test_valid_repairs_heal_the_soak_and_new_sessions(name):
    env, truth, (s0, s1) = replay(name)
    assert truth["postgres.probe.fresh_app_session_ok"] is True
    assert truth["postgres.sessions.app.below_probe"] == 0
    assert checkout(env, s0, s1) < 0.01


@pytest.mark.parametrize("name", ["noop", "session_only_set", "raise_capacity", "overbroad_alter_system",
                                  "overbroad_database_wide", "overbroad_role_wide"])
def test_naive_variants_leave_the_fault_and_fail_the_soak(name):
    env, truth, (s0, s1) = replay(name)
    assert truth["postgres.probe.fresh_app_session_ok"] is False
    assert checkout(env, s0, s1) > ERR_MAX


@pytest.mark.parametrize("name", ["overbroad_alter_system", "overbroad_role_wide"])
def test_recycling_under_the_fault_spreads_it_to_every_session(name):
    # The long-lived sessions were healthy; reconnecting them while the role setting holds poisons them too.
    env, truth, (s0, s1) = replay(name)
    assert truth["postgres.sessions.app.below_probe"] == truth["postgres.sessions.app.live"] > 0
    assert checkout(env, s0, s1, "trough") > 0.9


def test_reset_without_recycle_heals_because_long_lived_sessions_predate_the_fault():
    env, truth, (s0, s1) = replay("reset_without_recycle")
    assert truth["postgres.probe.fresh_app_session_ok"] is True
    assert checkout(env, s0, s1) < ERR_MAX


def test_reset_without_recycle_fails_when_the_pool_reopened_long_lived_sessions_under_the_fault():
    # Same script, one mechanism input changed: long-lived sessions now have a max age (Django CONN_MAX_AGE),
    # so some were reopened under the fault and keep 150ms until they age out again.
    twin = SC.twin.model_copy(deep=True)
    twin.spec["api_pool"] = {**twin.spec["api_pool"], "max_lifetime_s": 40}
    env = build_twin(twin, seed=1)
    env.clock.sleep(120)
    env.run('psql "$DB_ADMIN_DSN" -c "ALTER ROLE saleor_app IN DATABASE saleor RESET statement_timeout"')
    t = env.clock.now()
    stale = env.world.truth()["postgres.sessions.app.below_probe"]
    env.clock.sleep(20)
    assert stale > 0
    assert checkout(env, t, t + 20) > 0  # the stale long-lived sessions still cancel checkouts


def test_scope_variants_fix_the_fault_but_change_protected_settings():
    base = build_twin(SC.twin, seed=1).world.truth()
    for name, key in (("reset_plus_alter_system", "postgres.statement_timeout.global"),
                      ("reset_plus_database_wide", "postgres.timeout_scopes_other")):
        env, truth, (s0, s1) = replay(name)
        assert truth["postgres.probe.fresh_app_session_ok"] is True, name
        assert checkout(env, s0, s1) < ERR_MAX, name
        assert truth[key] != base[key], name


def test_verdicts_come_from_the_mechanism_not_the_command(monkeypatch):
    # Mutate PostgreSQL's precedence so that postgresql.auto.conf outranks the pg_db_role_setting catalog: the
    # global ALTER SYSTEM variant now heals sessions and the probe, which the real precedence never allows.
    env, truth, (s0, s1) = replay("overbroad_alter_system")
    assert truth["postgres.probe.fresh_app_session_ok"] is False and checkout(env, s0, s1) > ERR_MAX
    real = PostgresServer.catalog_for

    def file_wins(self, role, database):
        return {k: v for k, v in real(self, role, database).items() if k not in self.auto_conf}

    monkeypatch.setattr(PostgresServer, "catalog_for", file_wins)
    env, truth, (s0, s1) = replay("overbroad_alter_system")
    assert truth["postgres.probe.fresh_app_session_ok"] is True and checkout(env, s0, s1) < 0.01


def test_same_fix_typed_differently_gives_the_same_world():
    # A heredoc through kubectl exec, lower case, no recycle query text in common with the reference.
    env = build_twin(SC.twin, seed=2)
    env.clock.sleep(40)
    r = env.run("kubectl -n saleor exec -i postgres-0 -- psql -d saleor <<'SQL'\n"
                "alter role saleor_app in database saleor reset statement_timeout;\n"
                "select count(pg_terminate_backend(pid)) from pg_stat_activity where usename = 'saleor_app';\n"
                "SQL")
    assert r.exit_code == 0, r.stderr
    assert "ALTER ROLE" in r.stdout
    truth = env.world.truth()
    assert truth["postgres.probe.fresh_app_session_ok"] is True and truth["postgres.sessions.app.below_probe"] == 0


def test_deterministic_for_a_seed():
    def run(seed: int) -> str:
        env, truth, _ = replay("reference", seed=seed)
        return json.dumps([r.to_json() for r in env.world.ledger.records], sort_keys=True)

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("solution", ["reference", "reset_plus_alter_system", "overbroad_role_wide"])
def test_episode_json_is_identical_for_a_seed(solution):
    def doc() -> str:
        d = run_episode(SC, resolve_agent(f"replay:{solution}", SC), seed=5).to_json()
        d.pop("wall_s")
        return json.dumps(d, sort_keys=True)

    assert doc() == doc()


def test_protected_data_survives_and_new_orders_are_added():
    env, truth, _ = replay("reference")
    after = env.world.truth()
    assert after["postgres.data.order_order.count"] > truth["postgres.data.order_order.count"] >= 400
    for k in ("order_order", "product_product", "product_productvariant"):
        assert after[f"postgres.data.{k}.pre_agent_rows_equal"] is True
        assert after[f"postgres.data.{k}.count_not_decreased"] is True


def test_terminating_busy_sessions_fails_their_in_flight_requests_once():
    env = build_twin(SC.twin, seed=1)
    env.clock.sleep(SC.twin.profile.warmup_s + 8)  # inside the first peak, when the pool's sessions are busy
    env.run('psql -c "ALTER ROLE saleor_app IN DATABASE saleor RESET statement_timeout"')
    t = env.clock.now()
    env.run("psql -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'saleor_app'\"")
    env.clock.sleep(60)
    # The kill's losses are booked over the arrivals that follow it (the rest of this peak's segment).
    first, _ = env.world.ledger.select(t, t + 10)
    later, _ = env.world.ledger.select(t + 10, t + 60)
    assert 1 <= first.conn_errors <= 5
    assert later.error == 0
