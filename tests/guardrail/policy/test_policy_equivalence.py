"""Performance rewrites of the policy path must not change a single decision.

Two checks over the action corpus (tests/guardrail/actions/corpus.yaml) x a few contexts:
- EmbeddedOPA.decide (the fast path: the context loaded as data once, the input trimmed) gives exactly the findings
  of the same engine evaluating the full input inline (what OPAServer and `guardrail policy eval` send);
- both match decisions_snapshot.json, taken from the policy tree before the performance rewrites.

A deliberate rule change changes the snapshot: regenerate it with
    python tests/guardrail/policy/test_policy_equivalence.py --update [POLICY_DIR]
and review the diff of the ids it reports. POLICY_DIR (default: the shipped tree) may be a copy of the tree with a
performance rewrite undone, so the snapshot holds the decisions from before it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from guardrail.actions import normalise
from guardrail.context import IncidentContext, load_context
from guardrail.policy.embedded import DECISION_QUERY, EmbeddedOPA
from guardrail.resources import scenario_dir

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "actions" / "corpus.yaml"
SNAPSHOT = HERE / "decisions_snapshot.json"


def contexts() -> dict[str, dict]:
    bench = IncidentContext(
        id="bench", namespaces=["slack"], components=["svc-channel", "svc-auth", "redis-queue", "postgres"],
        restartable=["svc-channel"], not_restartable=["postgres"], protected_settings=["postgres.max_connections"],
        ceilings={"app.roles.channel.db.pool_size": 20, "app.roles.channel.db.max_overflow": 10},
        extra={"exceptions": ["SRE-WORKLOAD-*", {"id": "SRE-DATA-007", "reason": "queue keys are disposable"}],
               "grantees": ["'site_db'@'%'"]},
    )
    out = {"empty": IncidentContext().policy_input(), "bench": bench.policy_input()}
    for sid in ("ia-007", "ia-008"):
        out[sid] = load_context(scenario_dir() / "incident-arena" / sid / "scenario.yaml").policy_input()
    return out


@functools.lru_cache(maxsize=1)
def corpus_actions() -> tuple[tuple[str, str, dict], ...]:
    out = []
    for entry in yaml.safe_load(CORPUS.read_text()):
        cmd = entry["cmd"]
        out.extend((f"{cmd}#{i}", cmd, a.to_input()) for i, a in enumerate(normalise(cmd)))
    return tuple(out)


def corpus_inputs(ctx: dict) -> list[tuple[str, dict]]:
    return [(key, {"action": action, "context": ctx, "command": cmd}) for key, cmd, action in corpus_actions()]


def _digest(finding: dict) -> str:
    return hashlib.sha256(json.dumps(finding, sort_keys=True).encode()).hexdigest()[:10]


def fingerprint(doc: dict) -> str:
    """Each finding's list, id and a digest of its whole content (message and details), order-free."""
    return " ".join(sorted(f"{k}:{f['id']}:{_digest(f)}" for k in ("deny", "warn", "exempted")
                           for f in doc.get(k) or []))


def decision_doc(decision) -> dict:
    d = decision.to_dict()
    assert decision.error is None, decision.error
    return {"deny": d["deny"], "warn": d["warn"], "exempted": d["exempted"]}


def current_fingerprints(engine: EmbeddedOPA) -> dict[str, dict[str, str]]:
    return {name: {key: fingerprint(decision_doc(engine.decide(x))) for key, x in corpus_inputs(ctx)}
            for name, ctx in contexts().items()}


def inline_fingerprints(engine: EmbeddedOPA) -> dict[str, dict[str, str]]:
    """The same, with the whole input inline: works on any policy tree, including one from before the rewrites."""
    return {name: {key: fingerprint(engine.query(DECISION_QUERY, x)[0]["decision"]) for key, x in corpus_inputs(ctx)}
            for name, ctx in contexts().items()}


@pytest.fixture(scope="module")
def engine():
    with EmbeddedOPA() as e:
        yield e


@pytest.fixture(scope="module")
def fast(engine):
    return current_fingerprints(engine)


def test_fast_path_decides_exactly_like_the_full_inline_input(engine, fast):
    differ = []
    for name, ctx in contexts().items():
        for key, x in corpus_inputs(ctx):
            inline = fingerprint(engine.query(DECISION_QUERY, x)[0]["decision"])
            if fast[name][key] != inline:
                differ.append((name, key, fast[name][key], inline))
    # Both paths ran: the fast one sent references, and the engine holds each context once.
    assert len(engine._slot.loaded) == len(contexts())
    assert not differ, differ[:5]


def test_decisions_match_the_snapshot_taken_before_the_rewrites(fast):
    want = json.loads(SNAPSHOT.read_text())
    got = fast
    differ = [(ctx, key, want[ctx].get(key), fp) for ctx, rows in got.items() for key, fp in rows.items()
              if want.get(ctx, {}).get(key) != fp]
    assert not differ, (
        f"{len(differ)} decisions differ from the snapshot, e.g. {differ[:3]}. If a rule was changed on purpose, "
        "review these and regenerate: python tests/guardrail/policy/test_policy_equivalence.py --update")
    # The corpus exercises denies, warns and exemptions, or the comparison proves little.
    kinds = {item.split(":")[0] for rows in got.values() for fp in rows.values() for item in fp.split()}
    assert kinds == {"deny", "warn", "exempted"}


if __name__ == "__main__" and "--update" in sys.argv:
    args = sys.argv[sys.argv.index("--update") + 1:]
    with EmbeddedOPA(args[0] if args else None) as e:
        SNAPSHOT.write_text(json.dumps(inline_fingerprints(e), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")


def test_rules_read_the_context_only_through_lib():
    """EmbeddedOPA sends the context as a reference to data, so a rule reading input.context directly would see
    nothing and silently never fire; lib.context resolves either form."""
    from guardrail.resources import policy_dir

    offenders = []
    for f in sorted(Path(policy_dir()).rglob("*.rego")):
        if f.name.endswith("_test.rego") or f.relative_to(policy_dir()).as_posix() == "lib/sre.rego":
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "input.context" in code or '(input, "context"' in code:
                offenders.append(f"{f.name}:{n}: {line.strip()}")
    assert not offenders, "read the context as lib.context (or lib's sets), not input.context:\n" + "\n".join(offenders)


def test_a_context_changed_in_place_is_decided_with_its_new_content(engine):
    ctx = IncidentContext(namespaces=["slack"]).policy_input()
    x = {"action": normalise("kubectl delete pod svc-channel-0 -n slack")[0].to_input(), "context": ctx,
         "command": "kubectl delete pod svc-channel-0 -n slack"}
    assert "SRE-RESTART-001" not in engine.decide(x).rule_ids
    ctx["not_restartable"].append("svc-channel")  # the same dict object, new content
    assert "SRE-RESTART-001" in engine.decide(x).rule_ids
    ctx["not_restartable"].clear()
    assert "SRE-RESTART-001" not in engine.decide(x).rule_ids


def test_what_lib_derives_from_a_context_is_stored_once_and_equals_deriving_it_per_decision(engine):
    """EmbeddedOPA stores lib.context_derived beside each loaded context; rules read that copy instead of deriving
    the sets again per decision. The copy must be exactly what lib derives from the inline context."""
    from guardrail.policy.embedded import DERIVED_DATA_KEY

    for name, ctx in contexts().items():
        ref = engine._context_ref(ctx, engine._slot)
        assert ref is not None, name
        stored = engine.query(f"d := data.{DERIVED_DATA_KEY}[input.ref]", {"ref": ref})[0]["d"]
        inline = engine.query("d := data.guardrail.lib.context_derived", {"context": ctx})[0]["d"]
        assert stored == inline, name
        # And the rules read the stored copy on the fast path.
        via_ref = engine.query("d := data.guardrail.lib.context_derived", {"context_ref": ref})[0]["d"]
        assert via_ref == inline, name
