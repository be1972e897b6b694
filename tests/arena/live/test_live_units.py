"""Fast tests of the live stack's pure parts: address plan, hosts file, client host rewriting, load shape, ledger SLIs.

No server is started here; tests/arena/live/test_live_smoke.py runs the real stack.
"""

from __future__ import annotations

import json
import random
import socket

import pytest

from arena.live.hostwrap import rewrite_args, rewrite_env
from arena.live.loadgen import LoadShape
from arena.live.names import AddressPlan, HostsFile
from arena.live.sli import LedgerSLISource, read_ledger

TABLE = {"postgres": "127.150.3.2", "redis-queue": "127.150.3.3", "svc-message": "127.150.3.5"}


class FixedClock:
    def __init__(self, t: float):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_address_plan_gives_each_service_its_own_address_and_keeps_task_ports(tmp_path):
    plan = AddressPlan(random.Random(7))
    pg, msg = plan.add("postgres", 5432), plan.add("svc-message", 8000)
    assert pg.address != msg.address and pg.address.startswith("127.") and not pg.address.startswith("127.0.")
    assert (pg.port, msg.port) == (5432, 8000)
    assert plan.add("postgres", 5432) is pg
    hosts = plan.write_hosts(tmp_path / "hosts")
    assert hosts.resolve("svc-message") == msg.address
    assert hosts.resolve("127.0.0.1") == "127.0.0.1"  # not a stack name: passed through


def test_address_plan_moves_off_a_taken_port():
    plan = AddressPlan(random.Random(11))
    address = f"{plan.prefix}.2"
    with socket.socket() as s:
        s.bind((address, 0))
        s.listen()
        taken = s.getsockname()[1]
        ep = plan.add("busy", taken)
    assert ep.address == address and ep.port != taken


def test_hosts_file_reads_etc_hosts_format(tmp_path):
    p = tmp_path / "hosts"
    p.write_text("# comment\n127.1.2.3 a b  # trailing\n\n127.1.2.4\tc\n")
    assert HostsFile(p).table() == {"a": "127.1.2.3", "b": "127.1.2.3", "c": "127.1.2.4"}


@pytest.mark.parametrize("tool,args,want", [
    ("redis-cli", ["-h", "redis-queue", "CONFIG", "GET", "maxmemory"],
     ["-h", "127.150.3.3", "CONFIG", "GET", "maxmemory"]),
    ("redis-cli", ["-u", "redis://redis-queue:6379/0", "ping"], ["-u", "redis://127.150.3.3:6379/0", "ping"]),
    ("psql", ["postgresql://postgres:pw@postgres:5432/app", "-c", "ALTER ROLE postgres SET x = 1"],
     ["postgresql://postgres:pw@127.150.3.2:5432/app", "-c", "ALTER ROLE postgres SET x = 1"]),
    ("psql", ["host=postgres dbname=app user=app", "-c", "select 'host=postgres'"],
     ["host=127.150.3.2 dbname=app user=app", "-c", "select 'host=postgres'"]),
    ("psql", ["-hpostgres", "-U", "postgres"], ["-h127.150.3.2", "-U", "postgres"]),
    ("psql", ["-c", "UPDATE t SET x = 1 WHERE host=postgres"], ["-c", "UPDATE t SET x = 1 WHERE host=postgres"]),
    ("mysql", ["--host=mariadb", "-e", "select 1"], ["--host=mariadb", "-e", "select 1"]),  # unknown name kept
    ("psql", ["-h", "db.example.com"], ["-h", "db.example.com"]),
])
def test_client_wrappers_rewrite_host_positions_only(tool, args, want):
    assert rewrite_args(tool, args, TABLE) == want


def test_curl_keeps_its_url_and_gets_connect_to_mappings():
    out = rewrite_args("curl", ["-s", "http://svc-message:8000/healthz"], TABLE)
    assert out[-2:] == ["-s", "http://svc-message:8000/healthz"]
    assert "svc-message::127.150.3.5:" in out and out[out.index("svc-message::127.150.3.5:") - 1] == "--connect-to"


def test_env_hosts_are_mapped_for_libpq_and_mariadb():
    env = rewrite_env({"PGHOST": "postgres", "MYSQL_HOST": "redis-queue", "X": "postgres"}, TABLE)
    assert env["PGHOSTADDR"] == "127.150.3.2" and env["PGHOST"] == "postgres"
    assert env["MYSQL_HOST"] == "127.150.3.3" and env["X"] == "postgres"
    # A host on the command line wins over PGHOST, as in libpq: no PGHOSTADDR may redirect it.
    assert "PGHOSTADDR" not in rewrite_env({"PGHOST": "postgres"}, TABLE, host_in_args=True)


@pytest.mark.parametrize("args,named", [
    (["-h", "elsewhere", "-c", "select 1"], True), (["-hx"], True), (["postgresql://u@h/db"], True),
    (["host=h dbname=d"], True), (["-c", "select 'host=x'"], False), (["-U", "postgres", "app"], False),
    (["-c", "select * from t where host=1"], False),
])
def test_names_a_host(args, named):
    from arena.live.hostwrap import names_a_host

    assert names_a_host(args) is named


def test_load_shape_cycles_peak_then_trough_after_warmup():
    shape = LoadShape(warmup_s=4, warmup_rps=2, cycles=[[4, 12, 6, 3]])
    assert shape.cycle_s == 10
    assert shape.span_at(1).label == "warmup"
    s = shape.span_at(5)
    assert (s.label, s.start, s.end, s.rps) == ("c1.peak", 4, 8, 12)
    assert shape.span_at(9).label == "c1.trough"
    s = shape.span_at(4 + 10 * 6 + 4.5)
    assert (s.label, s.start, s.end) == ("c7.trough", 68, 74)


def test_load_shape_spans_always_end_after_the_time_asked_with_fractional_durations():
    """The arrival loops advance by span ends: a span's own end must fall in the next span, or the generator spins
    (3.333 + 6.667 s cycles stalled it at the second peak's end)."""
    shape = LoadShape(warmup_s=5, warmup_rps=12, cycles=[[3.333, 24, 6.667, 12]])
    t, labels = 0.0, []
    for _ in range(600):
        span = shape.span_at(t)
        assert span.end > t
        labels.append(span.label)
        t = span.end
    assert labels[:5] == ["warmup", "c1.peak", "c1.trough", "c2.peak", "c2.trough"]
    assert labels[-1] == "c300.peak"


def test_load_shape_rejects_a_malformed_cycle():
    with pytest.raises(ValueError):
        LoadShape(cycles=[[4, 12, 0, 3]])


def _row(t, phase, ok=True, correct=True, timeout=False, dropped=False, ms=10.0, driver="d", detail=""):
    return {"t": t, "sent_s": t, "phase": phase, "driver": driver, "latency_ms": None if timeout else ms, "ok": ok,
            "correct": correct, "timeout": timeout, "dropped": dropped, "detail": detail}


def test_ledger_sli_per_phase_segments_with_incident_arena_arithmetic(tmp_path):
    p = tmp_path / "ledger.jsonl"
    rows = [_row(100 + i * 0.1, "c1.peak", ms=10 + i) for i in range(20)]
    rows += [_row(103, "c1.peak", ok=False, correct=False, detail="send 503 pool_timeout"),
             _row(103.1, "c1.peak", timeout=True, ok=False, correct=False),
             _row(103.2, "c1.peak", dropped=True, ok=False, correct=False),
             _row(103.3, "c1.peak", correct=False)]
    rows += [_row(106 + i * 0.5, "c1.trough", ms=5) for i in range(8)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn": ')  # a torn last line is skipped
    src = LedgerSLISource(p, FixedClock(110.0))
    err = src.sli("error_ratio", 20)
    assert [(s.labels["phase"], s.labels["cycle"]) for s in err] == [("peak", "1"), ("trough", "1")]
    assert err[0].count == 23  # dropped arrivals are outside the base
    assert err[0].value == pytest.approx(2 / 23, abs=1e-6) and err[1].value == 0
    assert src.sli("goodput", 20)[0].value == pytest.approx(20 / 23, abs=1e-6)
    assert src.sli("conn_errors", 20)[0].value == 1
    assert src.sli("latency_p99_ms", 20, labels={"phase": "trough"})[0].value == 5
    fixed = src.sli("error_ratio", 5, step=2.5)  # [105, 107.5) and [107.5, 110): trough rows only
    assert [(s.count, s.value) for s in fixed] == [(3, 0), (5, 0)]
    with pytest.raises(ValueError):
        src.sli("nonsense", 10)


def test_read_ledger_is_incremental(tmp_path):
    p = tmp_path / "l.jsonl"
    p.write_text(json.dumps(_row(1, "warmup")) + "\n")
    rows, off = read_ledger(p)
    with open(p, "a") as f:
        f.write(json.dumps(_row(2, "c1.peak")) + "\n")
    more, off2 = read_ledger(p, off)
    assert len(rows) == 1 and [r.phase for r in more] == ["peak"] and off2 > off


def test_every_live_incident_file_validates_and_names_known_substrates():
    from arena.live.replay import INCIDENTS_DIR, LiveIncident
    from arena.live.stack import SubstrateSpec

    ids = sorted(p.stem for p in INCIDENTS_DIR.glob("*.yaml"))
    assert ids == ["ia-004", "ia-006", "ia-018"]
    for i in ids:
        inc = LiveIncident.load(i)
        assert inc.id == i and 8 <= inc.shape.cycle_s <= 12  # short cycles: an episode takes about a minute
        for name in inc.substrates:
            spec, _ = SubstrateSpec.load(name)
            apps = {a.name for a in spec.apps}
            assert set(inc.image_env) <= apps


def test_a_live_incident_without_a_seed_of_its_own_runs_the_tasks_seed():
    from arena.live.replay import LiveIncident
    from arena.scenario import load_scenario

    assert LiveIncident.load("ia-006").shape.seed == load_scenario("ia-006").twin.profile.seed == 42
    assert LiveIncident.load("ia-018").shape.seed == 18  # its own, kept


def test_an_unknown_history_step_is_an_input_error_naming_the_file(tmp_path, monkeypatch):
    from arena.live import replay
    from guardrail.errors import InputError

    (tmp_path / "ia-998.yaml").write_text("id: ia-998\nsubstrates: [frappe]\nhistory:\n  queue_flood: x.yaml\n")
    monkeypatch.setattr(replay, "INCIDENTS_DIR", tmp_path)
    with pytest.raises(InputError, match="queue_flood") as e:
        replay.LiveIncident.load("ia-998")
    assert "ia-998.yaml" in str(e.value)


def test_an_unknown_live_incident_is_an_input_error():
    from arena.live.replay import LiveIncident
    from guardrail.errors import InputError

    with pytest.raises(InputError, match="no live wiring for ia-999"):
        LiveIncident.load("ia-999")


@pytest.mark.parametrize("shown,ms", [("150ms", 150), ("30s", 30000), ("0", 0), ("2min", 120000), ("1h", 3600000)])
def test_postgres_durations_as_shown_by_show(shown, ms):
    from arena.live.truth import _ms

    assert _ms(shown) == ms


def test_a_sigterm_stops_every_running_stack_before_the_process_exits(tmp_path):
    """Stack servers run in sessions of their own; install_cleanup() makes SIGTERM stop them (here a stand-in
    stack whose down() leaves a mark), then exit 143."""
    import subprocess
    import sys

    mark = tmp_path / "stopped"
    script = f"""
import os, signal, time
from arena.live import stack
class Fake:
    def down(self):  # as LiveStack.down: stop, then leave the registry
        open({str(mark)!r}, "a").write("down\\n")
        stack._RUNNING.discard(self)
        return []
stack._RUNNING.add(Fake())
stack.install_cleanup()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 143, p.stderr
    assert mark.read_text() == "down\n"  # stopped once: the exit's own pass finds nothing left


def test_stop_running_stacks_tolerates_a_failing_stop_and_stops_the_rest():
    from arena.live import stack

    calls = []

    class Boom:
        def down(self):
            calls.append("boom")
            raise RuntimeError("gone")

    class Fine:
        def down(self):
            calls.append("fine")
            stack._RUNNING.discard(self)
            return []

    a, b = Boom(), Fine()
    stack._RUNNING.update({a, b})
    try:
        stack.stop_running_stacks()
    finally:
        stack._RUNNING.discard(a)
    assert sorted(calls) == ["boom", "fine"] and b not in stack._RUNNING


def test_the_stacks_client_wrapper_passes_over_the_guard_shim_that_started_it(tmp_path, monkeypatch):
    """Under `guardrail shell` the psql shim runs the stack's psql wrapper, which runs "the first psql on PATH
    but itself": the shim again, for ever (21 GB once). It passes over the shim whose command it is part of."""
    from arena.live import hostwrap
    from guardrail.adapters.shell import build_shim_dir

    shims = build_shim_dir(tmp_path / "shims", tools=("psql",), search_path="", session="s1")
    real = tmp_path / "real"
    real.mkdir()
    (real / "psql").write_text("#!/bin/sh\n")
    (real / "psql").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{tmp_path / 'stackbin'}:{real}")
    monkeypatch.setenv("LIVE_BIN_DIR", str(tmp_path / "stackbin"))
    monkeypatch.delenv("GUARDRAIL_SHIM_ACTIVE", raising=False)
    assert hostwrap._real_binary("psql") == str(shims / "psql")  # called by the agent itself: through the guard
    monkeypatch.setenv("GUARDRAIL_SHIM_ACTIVE", "s1:psql")
    assert hostwrap._real_binary("psql") == str(real / "psql")  # called by that shim: on to the real client
    monkeypatch.setenv("GUARDRAIL_SHIM_ACTIVE", "other:psql s1:kubectl")
    assert hostwrap._real_binary("psql") == str(shims / "psql")
