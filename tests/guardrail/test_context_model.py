"""The context model: floors, protected components, protected data and safeguards reach the rules; an entry the
guard cannot recognise is exit 2 with file:line and the nearest names; `guardrail context explain`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from arena.scenario import list_scenarios
from guardrail.actions import normalise
from guardrail.cli import _register, cli
from guardrail.context import load_context
from guardrail.context_names import KEY_FAMILIES, key_problem
from guardrail.safeguards import safeguard_library
from verifiers.context import PublicContext

_register()

CTX = """\
id: t
components: [svc-channel, postgres, redis-queue, redis-cache]
floors: {app.roles.*.db.pool_timeout_s: 1}
protected_components: [redis-cache]
protected_data:
  - {name: messages}
  - {name: history, keep: [delete, hide, truncate, overwrite]}
safeguards: {keep_on: [all], unchanged: [autovacuum]}
"""


def _check(ctx_file, command: str) -> tuple[int, set[str]]:
    r = CliRunner().invoke(cli, ["check", "--json", "--context", str(ctx_file), "--", command])
    doc = json.loads(r.output)
    return r.exit_code, {f["id"] for f in doc["decision"]["deny"]}


@pytest.fixture
def ctx_file(tmp_path):
    p = tmp_path / "ctx.yaml"
    p.write_text(CTX)
    return p


@pytest.mark.parametrize("command, rule", [
    ("""echo '{"db":{"pool_timeout_s":0.5}}' | restart-svc.sh channel""", "SRE-CAP-007"),
    ("redis-cli -h redis-cache CONFIG SET maxmemory 10mb", "SRE-SCOPE-007"),
    ("reconfigure-infra.sh redis-cache maxmemory 10mb", "SRE-SCOPE-007"),
    ("kubectl rollout restart deploy/redis-cache", "SRE-RESTART-001"),
    ("""psql -c "UPDATE messages SET deleted_at = now() WHERE channel_id = 'c1'" """, "SRE-DATA-017"),
    ("""psql -c "UPDATE history SET note = 'x' WHERE id = 1" """, "SRE-DATA-018"),
    ("""psql -c "ALTER SYSTEM SET autovacuum = off" """, "SRE-SAFE-008"),
    ("""psql -c "ALTER SYSTEM SET autovacuum_naptime = 5" """, "SRE-SAFE-009"),
])
def test_each_new_entry_denies_what_it_protects(ctx_file, command, rule):
    code, denied = _check(ctx_file, command)
    assert code == 1 and rule in denied, denied


@pytest.mark.parametrize("command", [
    """echo '{"db":{"pool_timeout_s":2}}' | restart-svc.sh channel""",
    "redis-cli -h redis-queue CONFIG SET maxmemory 10mb",
    "redis-cli -h redis-cache GET session:1",
    """psql -c "UPDATE messages SET seq = 3 WHERE id = 1" """,
    """psql -c "ALTER SYSTEM SET work_mem = '8MB'" """,
])
def test_what_the_entries_do_not_cover_is_allowed(ctx_file, command):
    code, denied = _check(ctx_file, command)
    assert code == 0 and not denied, denied


def test_a_component_left_alone_is_never_restarted_by_the_probe_either(ctx_file):
    ctx = PublicContext.of(load_context(ctx_file))
    assert not ctx.may_restart("redis-cache") and "redis-cache" in ctx.not_restartable


@pytest.mark.parametrize("body, line, wanted", [
    ("components: [redis-queue]\nprotected_settings:\n  - redis.appendonly\n  - redis-queue.maxmemory\n", 4,
     "nearest: redis.maxmemory"),
    ("components: [web, redis-queue]\nrestartable: [web, redis-qeue]\n", 2, "nearest: redis-queue"),
    ("components: [web]\nprotected_components: [db]\n", 2, "not a component"),
    ("floors:\n  pool_timeout_s: 1\n", 2, "not a setting key"),
    ("safeguards:\n  keep_on: [autovacum]\n", 2, "nearest: autovacuum"),
    ("protected_data:\n  - {name: 'messages table'}\n", 2, "not a table name"),
    ("constraints:\n  - {id: f, text: t, kind: floor, targets: [app.x]}\n", 2, "needs a number"),
])
def test_an_entry_the_guard_cannot_recognise_is_exit_2_with_its_line(tmp_path, body, line, wanted):
    p = tmp_path / "ctx.yaml"
    p.write_text(body)
    r = CliRunner().invoke(cli, ["context", "explain", str(p)])
    assert r.exit_code == 2
    assert f"{p}:{line}:" in r.output and wanted in r.output, r.output
    # the same on every load, e.g. check
    assert CliRunner().invoke(cli, ["check", "--context", str(p), "--", "kubectl get pods"]).exit_code == 2


def test_explain_names_the_rule_behind_each_entry(ctx_file):
    r = CliRunner().invoke(cli, ["context", "explain", "--json", str(ctx_file)])
    assert r.exit_code == 0, r.output
    entries = {(e["field"], e["entry"]): e for e in json.loads(r.output)["entries"]}
    assert "SRE-CAP-007" in entries[("floors", "app.roles.*.db.pool_timeout_s")]["enforced_by"]
    assert "SRE-SCOPE-007" in entries[("protected_components", "redis-cache")]["enforced_by"]
    assert "SRE-DATA-018" in entries[("protected_data", "history")]["enforced_by"]
    assert "SRE-DATA-018" not in entries[("protected_data", "messages")]["enforced_by"]
    assert len([k for k in entries if k[0] == "safeguards.keep_on"]) == len(safeguard_library().categories)
    assert "postgres.autovacuum" in entries[("safeguards.unchanged", "autovacuum")]["protects"]
    text = CliRunner().invoke(cli, ["context", "explain", str(ctx_file)])
    assert text.exit_code == 0 and "protected_components: redis-cache" in text.output


def test_every_shipped_context_loads_and_every_key_its_scripts_write_is_in_a_known_family():
    # The key families the check accepts are the ones the normaliser writes: a new family must be added there.
    for sc in list_scenarios():
        for sol in sc.solutions.values():
            for st in sol.script:
                if st.run is None:
                    continue
                for a in normalise(st.run):
                    for k in a.keys:
                        assert key_problem(k.key, ()) is None, (sid, st.run, k.key)
    assert set(KEY_FAMILIES) >= {"redis", "postgres", "app"}
    assert load_context("examples/ctx.yaml").id
