"""The guard refuses commands that write its own files (journal, policy tree, context/criteria files), decided from
the normaliser's file targets after path normalisation, whatever tool writes them; and its journal notices being
unlinked, replaced or truncated, puts itself back and says so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from guardrail.actions import normalise
from guardrail.guard import JOURNAL_TAMPERED, Guard
from guardrail.journal import Journal, read_journal
from guardrail.ownfiles import OWN_FILES_RULE, OwnFiles
from guardrail.policy.base import Decision, Mode, Outcome
from verifiers.protocols import CommandResult


class AllowAll:
    """An engine that allows everything: what is refused here is refused by the guard, not by a rule."""

    def __init__(self):
        self.inputs = []

    def decide(self, input):
        self.inputs.append(input)
        return Decision(Outcome.ALLOW, "d")


@pytest.fixture
def guard(tmp_path):
    (tmp_path / "journals").mkdir()
    (tmp_path / "policy").mkdir()
    (tmp_path / "ctx.yaml").write_text("id: x\n")
    (tmp_path / "criteria.yaml").write_text("{}\n")
    journal = Journal(tmp_path / "journals" / "agent.jsonl")
    own = OwnFiles().add_files([tmp_path / "ctx.yaml", tmp_path / "criteria.yaml"]).add_dir(tmp_path / "policy")
    g = Guard(AllowAll(), journal=journal, own_files=own, normaliser=normalise)
    yield g, tmp_path
    journal.close()


# {J} the journal file, {D} its directory, {C} the context file, {P} the policy directory, {T} their parent.
WRITES = [
    "sed -i 's/deny/allow/' {J}",
    "sed -i.bak -e 1d {J}",
    "echo '{{}}' | tee {J}",
    "echo x | tee -a {C}",
    "echo > {J}",
    "echo x >> {C}",
    ": > {J}",
    "cp /dev/null {J}",
    "cp /tmp/other.rego {P}/",
    "install -m 644 /tmp/x {P}/rules.rego",
    "mv /tmp/fake.jsonl {J}",
    "mv {J} /tmp/gone",
    "mv {C} /tmp/",
    "rm {J}",
    "rm -f {C}",
    "rm -rf {D}",
    "rm -rf {T}",
    "rm -rf {P}/../policy",
    "truncate -s 0 {J}",
    "dd if=/dev/zero of={J} bs=1 count=1",
    "ln -sf /dev/null {J}",
    "chmod 000 {J}",
    "chmod -R a-w {T}",
    "sort -o {C} /tmp/x",
    "rm {D}/*.jsonl",
    "rm -rf {T}/j*s",
    "sed -i 1d journals/agent.jsonl",
    "rm ../journals/agent.jsonl",
    "cd /tmp && rm -rf policy",
    "sh -c 'rm -f {J}'",
    "sudo rm -f {J}",
    "find {D} -delete",
]


@pytest.mark.parametrize("template", WRITES)
def test_a_write_to_the_guards_own_files_is_refused_by_the_guard(guard, template):
    g, root = guard
    command = template.format(J=root / "journals" / "agent.jsonl", D=root / "journals", C=root / "ctx.yaml",
                              P=root / "policy", T=root)
    adm = g.before(command)
    rules = [r for d in adm.decisions for r in d.rule_ids]
    assert OWN_FILES_RULE in rules, [(a.tool, a.verb, a.target.name) for a in adm.actions]
    assert not adm.runs and adm.outcome is Outcome.DENY


@pytest.mark.parametrize("mode", list(Mode))
def test_the_refusal_holds_in_every_mode(guard, mode):
    g, root = guard
    g.mode = mode
    adm = g.before(f"sed -i 1d {root / 'journals' / 'agent.jsonl'}")
    assert not adm.runs and [r for d in adm.decisions for r in d.rule_ids] == [OWN_FILES_RULE]


@pytest.mark.parametrize("command", [
    "cat {J}", "tail -n 5 {J}", "grep deny {C}", "ls -l {D}", "echo x > /tmp/notes.txt", "cp {C} /tmp/ctx-copy.yaml",
    "rm -f /tmp/other.jsonl", "sed -i 1d /tmp/agent.jsonl.bak", "mkdir -p /tmp/work", "cp x /tmp/",
])
def test_reads_and_other_files_are_not_refused(guard, command):
    """The control: reading the guard's files, and writing anything else, is left to the policy."""
    g, root = guard
    adm = g.before(command.format(J=root / "journals" / "agent.jsonl", D=root / "journals", C=root / "ctx.yaml"))
    assert adm.runs and OWN_FILES_RULE not in [r for d in adm.decisions for r in d.rule_ids]


def test_a_symbolic_link_to_the_journal_is_the_journal(guard):
    g, root = guard
    link = root / "innocent.log"
    link.symlink_to(root / "journals" / "agent.jsonl")
    assert not g.before(f"echo x > {link}").runs


def test_the_shipped_policy_tree_is_protected_by_default(tmp_path):
    from guardrail.policy.embedded import EmbeddedOPA
    from guardrail.resources import shipped_policy_dir

    with EmbeddedOPA() as engine:
        g = Guard(engine, journal=Journal(tmp_path / "j.jsonl"))
        rego = shipped_policy_dir() / "rules" / "data.rego"
        adm = g.before(f"sed -i 's/deny/warn/' {rego}")
        assert not adm.runs and OWN_FILES_RULE in [r for d in adm.decisions for r in d.rule_ids]


@pytest.mark.parametrize("tamper", [
    lambda p: p.unlink(),
    lambda p: subprocess.run(["sed", "-i", "1d", str(p)], check=True),
    lambda p: os.replace(p.with_name("fake"), p) if p.with_name("fake").write_text("{}\n") else None,
])
def test_the_journal_puts_itself_back_when_unlinked_or_replaced_and_says_so(tmp_path, capsys, tamper):
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    g = Guard(AllowAll(), journal=journal, normaliser=normalise)
    g.before("kubectl get pods")
    before = [(r["seq"], r["kind"]) for r in read_journal(path)]
    tamper(path)
    adm = g.before("kubectl get pods -n slack")
    after = [(r["seq"], r["kind"]) for r in read_journal(path)]
    assert after[:len(before)] == before  # every record is back, from the guard's own descriptor
    assert after[len(before)][1] == "journal_tampered" and after[-1][1] == "command"
    assert [f.code for f in adm.feedback] == [JOURNAL_TAMPERED]
    err = capsys.readouterr().err
    assert f"journal {path} was {adm.feedback[0].evidence['what']}" in err
    assert [f.code for f in g.before("kubectl get pods").feedback] == []  # said once
    journal.close()


def test_a_journal_cut_short_in_place_is_reported(tmp_path, capsys):
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    g = Guard(AllowAll(), journal=journal, normaliser=normalise)
    g.before("kubectl get pods")
    os.truncate(path, 0)
    adm = g.before("kubectl get pods")
    assert [f.code for f in adm.feedback] == [JOURNAL_TAMPERED] and adm.feedback[0].evidence["what"] == "truncated"
    assert "was truncated" in capsys.readouterr().err
    assert [r["kind"] for r in read_journal(path)] == ["journal_tampered", "command"]
    journal.close()


def test_tampering_while_a_command_runs_is_told_with_its_result(tmp_path):
    """The command itself may erase the journal (it ran unread, in a script): the next record finds it."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    g = Guard(AllowAll(), journal=journal, normaliser=normalise)
    adm = g.before("./cleanup.sh")
    path.unlink()
    fb = g.after(adm, CommandResult(command="./cleanup.sh", stdout="", stderr="", exit_code=0))
    assert [f.code for f in fb] == [JOURNAL_TAMPERED] and path.exists()
    journal.close()
