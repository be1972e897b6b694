"""The decision input grows linearly with the command: an invocation that splits into many actions (statements,
files, URLs, heredoc lines) gives each its own part as raw, not the whole text (2,000 statements of one psql -c made
40 MB of input and ran past the evaluation deadline); past the normaliser's limits a command is refused whole."""

from __future__ import annotations

import json
import shlex

import pytest

from guardrail.actions import normalise
from guardrail.actions.normalise import MAX_ACTIONS, MAX_CHARS, MAX_COMMANDS

# One command of n parts, for each way one invocation splits into several actions.
SPLITS = {
    "psql -c statements": lambda n: "psql -h postgres -c '" + "SELECT 1; " * n + "SELECT 2'",
    "psql heredoc": lambda n: "psql -h postgres <<'EOF'\n" + "SELECT 1;\n" * n + "EOF",
    "mysql -e statements": lambda n: "mysql -h mariadb -e '" + "SELECT 1; " * n + "SELECT 2'",
    "psql in kubectl exec": lambda n: "kubectl exec -n slack postgres-0 -- psql -c '" + "SELECT 1; " * n + "'",
    "psql in sh -c": lambda n: "sh -c \"psql -c 'SELECT 1;" + " SELECT 1;" * n + "'\"",
    "redis-cli heredoc": lambda n: "redis-cli -h redis <<'EOF'\n" + "GET k\n" * n + "EOF",
    "rm files": lambda n: "rm -f " + " ".join(f"/tmp/scratch/file-{i}" for i in range(n)),
    "curl urls": lambda n: "curl -s " + " ".join(f"http://svc-channel:8080/health/{i}" for i in range(n)),
    "commands in sequence": lambda n: "; ".join("kubectl get pods -n slack" for _ in range(n // 4)),
}


def _input_bytes(command: str) -> tuple[int, int]:
    actions = normalise(command)
    return len(actions), sum(len(json.dumps(a.to_input())) for a in actions)


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_the_decision_input_grows_linearly_with_the_parts(name):
    make = SPLITS[name]
    (n1, b1), (n10, b10), (n100, b100) = (_input_bytes(make(n)) for n in (20, 200, 2000))
    assert n1 < n10 < n100 <= MAX_ACTIONS  # the command did split, at every size
    # Linear: ten times the parts is about ten times the bytes (quadratic would be a hundred times).
    assert b10 <= 12 * b1 and b100 <= 12 * b10, (b1, b10, b100)


def test_each_part_keeps_its_invocation_and_its_own_text():
    actions = normalise("psql -h postgres -U app -c '" + "SELECT 1; " * 200 + "SELECT rolpassword FROM pg_authid'")
    last = actions[-1]
    assert last.raw == "psql -h postgres -U app -c 'SELECT rolpassword FROM pg_authid'"
    assert last.details["statement"] == "SELECT rolpassword FROM pg_authid"
    files = normalise("rm -rf " + " ".join(f"/var/tmp/dir-{i}" for i in range(100)) + " /etc")
    assert files[-1].raw == "rm -rf /etc" and files[-1].target.name == "/etc"


def test_a_long_statement_is_kept_whole_for_the_rules():
    """The statement was cut at 2,000 characters: a comment of that length hid the words that make it a drop."""
    sql = "ALTER TABLE users /* " + "x" * 5000 + " */ DROP COLUMN email"
    (action,) = normalise(f"psql -c '{sql}'")
    assert action.details["statement"].endswith("DROP COLUMN email")


@pytest.mark.parametrize("command,limit", [
    ("psql -c '" + "SELECT 1; " * (MAX_ACTIONS + 1) + "'", "too-many-actions"),
    ("rm " + " ".join(f"/tmp/f{i}" for i in range(MAX_ACTIONS + 1)), "too-many-actions"),
    ("kubectl get pods # " + "x" * MAX_CHARS, "oversized"),
    ("for i in " + " ".join(str(k) for k in range(1, 33)) + "; do for j in " + " ".join(str(k) for k in range(1, 33))
     + "; do kubectl delete pod p$i$j; done; done", "too-complex"),
])
def test_a_command_past_a_limit_is_one_action_marked_with_the_limit(command, limit):
    (action,) = normalise(command)
    assert action.details == {"limit": limit} and action.mutating == "unknown"


def test_the_actions_of_one_invocation_share_its_words_not_a_copy_each():
    """N statements of one `psql -c` are N actions of one invocation: each held its own copy of the -c text
    (`str(word)` copies), and a 126 KB command of 14,000 statements took 1.8 GB before it was refused as too many
    actions. The words are converted once and shared."""
    from guardrail.actions.invocation import Invocation
    from guardrail.actions.words import Word

    inv = Invocation(argv=[Word("psql"), Word("-c"), Word("SELECT 1;" * 1000)])
    first, second = inv.action("psql", "select"), inv.action("psql", "select")
    assert first.words == ["psql", "-c", "SELECT 1;" * 1000]
    assert first.words[2] is second.words[2]
    assert type(first.words[2]) is str  # a plain string, as before
    inv.argv[2] = Word("SELECT 2")  # a word replaced is converted anew, not served from the cache
    assert inv.action("psql", "select").words[2] == "SELECT 2"


@pytest.mark.parametrize("tool", ["psql -c", "mysql -e"])
def test_reading_many_statements_of_a_long_text_holds_no_copy_per_statement(tool):
    """300 statements in a 150 KB text (a long comment): the memory the reading allocates at its peak stays near
    a few copies of the text, not one per statement (that was 300 x 150 KB = 45 MB for the words alone, and as
    much again for mysql's per-action keys)."""
    import tracemalloc

    text = "SELECT 1;" * 300 + "/* " + "x" * 150_000 + " */"
    cmd = f"{tool} {shlex.quote(text)}"
    tracemalloc.start()
    try:
        actions = normalise(cmd)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(actions) == 300 and all(a.mutating is False for a in actions)
    assert peak < 20_000_000, f"{peak:,} bytes at the peak"
