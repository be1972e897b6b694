"""The differential-execution fuzzer (bench/differential_fuzz.py, issue #25 item 5) on a bounded, seeded sample:
every input the guard allows is run in a real bash whose tools are logging stubs, and nothing it ran may be a
command the guard denies on its own. Also the controls that make that check able to fail (the stubs record what
runs, through PATH and through absolute paths; a denied call that ran is reported), and the bypasses the fuzzer
found, each read against what bash does with the same text."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.actions import normalise
from guardrail.actions.wrappers import as_posix_sh

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = 400
SEED = 0

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("python3") is None,
                                reason="needs bash and a system python3 for the stubs")


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("differential_fuzz", ROOT / "bench" / "differential_fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["differential_fuzz"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sandbox(fuzz):
    box = fuzz.Sandbox()
    yield box
    box.close()


@pytest.fixture(scope="module")
def oracle(fuzz):
    o = fuzz.Oracle()
    yield o
    o.close()


def test_the_stubs_record_every_call_with_its_stdin(sandbox):
    calls = sandbox.run("rm -rf /var/lib/postgresql/data; echo FLUSHALL | redis-cli; "
                        "psql -c 'SELECT 1' -f - <<'EOF'\nDROP TABLE users;\nEOF\nkubectl get pods")
    assert [(c["tool"], c["args"]) for c in calls] == [
        ("rm", ["-rf", "/var/lib/postgresql/data"]), ("redis-cli", []), ("psql", ["-c", "SELECT 1", "-f", "-"]),
        ("kubectl", ["get", "pods"])]
    assert calls[1]["stdin"] == "FLUSHALL\n" and calls[2]["stdin"] == "DROP TABLE users;\n"
    assert "stdin" not in calls[0] and "stdin" not in calls[3]


def test_absolute_paths_reach_the_stubs_in_the_namespace_sandbox(sandbox):
    if sandbox.kind != "namespace":
        pytest.skip("no mount namespace here: the generator leaves absolute paths out")
    real = shutil.which("rm", path="/usr/bin:/bin")
    calls = sandbox.run(f"{real} -rf /var/lib/postgresql/data; command -p rm -rf /x")
    assert [(c["tool"], c["args"]) for c in calls] == [("rm", ["-rf", "/var/lib/postgresql/data"]),
                                                      ("rm", ["-rf", "/x"])]


def test_the_sandbox_keeps_the_run_in_its_directory(sandbox):
    if sandbox.kind != "namespace":
        pytest.skip("no mount namespace here: the run is confined by PATH, cwd and HOME only")
    outside = sandbox.root.parent / (sandbox.root.name + "-outside")  # in a world-writable /tmp
    try:
        calls = sandbox.run(f"echo x > {outside}; echo y > ../escaped; echo z > inside && cat inside | tee copy")
        assert not outside.exists() and not (sandbox.root / "escaped").exists()
        assert calls == [{"tool": "tee", "args": ["copy"]}]  # the run's own directory is writable
    finally:
        outside.unlink(missing_ok=True)


def test_a_denied_call_that_ran_is_reported_as_a_bypass(fuzz, sandbox, oracle):
    # Negative control: an oracle that lets this one input through, as a broken normaliser would.
    text = "X=redis-cli; $X FLUSHALL"
    assert not oracle.runs(text)

    class Lenient:
        def runs(self, t):
            return True if t == text else oracle.runs(t)

        call_text = staticmethod(oracle.call_text)

    out = fuzz.check_one(Lenient(), sandbox, 0, text, ["var"])
    assert out.executed and [b["asked"] for b in out.bypasses] == ["redis-cli FLUSHALL"]


def test_the_recorded_stdin_goes_to_the_guard_as_the_daemon_sends_it(oracle):
    call = {"tool": "psql", "args": ["-c", "SELECT 1", "-f", "-"], "stdin": "DROP TABLE users;\n"}
    assert not oracle.runs(oracle.call_text(call))
    assert oracle.runs(oracle.call_text({**call, "stdin": "SELECT 1;\n"}))


def test_the_sample_is_seeded(fuzz):
    assert [fuzz.generate(SEED, i).text for i in range(50)] == [fuzz.generate(SEED, i).text for i in range(50)]
    assert fuzz.generate(SEED, 3).text != fuzz.generate(SEED + 1, 3).text or \
        fuzz.generate(SEED, 4).text != fuzz.generate(SEED + 1, 4).text


def test_nothing_the_guard_allows_runs_a_command_it_denies(fuzz, sandbox, oracle):
    absolute = sandbox.kind == "namespace"
    outcomes = []
    for i in range(SAMPLE):
        s = fuzz.generate(SEED, i, absolute)
        outcomes.append(fuzz.check_one(oracle, sandbox, i, s.text, s.constructs))
    summary = fuzz.summarise(outcomes, SEED, sandbox.kind, 0.0)
    assert summary["bypasses"] == 0, [(b["input"], [c["asked"] for c in b["calls"]])
                                      for b in summary["bypass_inputs"]]
    # The sample is not vacuous: the guard allowed and bash ran a good share, and the stubs saw calls.
    assert summary["inputs"] == SAMPLE
    assert summary["executed"] >= SAMPLE // 20 and summary["recorded_calls"] >= SAMPLE // 20
    assert len(summary["by_construct"]) >= 25


# -- the bypasses the fuzzer found, closed at their cause, each checked against what bash does -------------------

def _bash_argv(text: str) -> list[str]:
    """The words bash makes of WORDS as a command's arguments."""
    out = subprocess.run(["bash", "-c", f"set -- {text}; for w; do printf '%s\\0' \"$w\"; done"],
                         capture_output=True, check=True, timeout=30)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("words", [
    "{stop,} postgresql", "a{b,c}d", '"x"{y,z}', "\\{a,b}", "{a,{b,c}}", "{a,b}'{c,d}'", "{a}", "x{,}", "{,}",
    "/var/lib/{postgresql,mysql}/data", "pre{1,2}{a,b}", "{a,b\\,c}", "$'a'{b,c}",
])
def test_brace_expansion_is_read_as_bash_expands_it(words):
    (action,) = normalise(f"printf %s\\\\0 {words}")
    assert list(action.words[2:]) == _bash_argv(words)


@pytest.mark.parametrize("text", [
    "systemctl {stop,} postgresql",  # found by the fuzzer: bash ran `systemctl stop postgresql`
    "for a in {stop,x}; do systemctl $a postgresql; done",
    "kubectl delete {deployment,x} api -n prod",
])
def test_a_denied_command_hidden_in_a_brace_list_is_denied(oracle, text):
    assert not oracle.runs(text)


# A POSIX sh (dash is /bin/sh on Debian) has no `$'...'`: the fuzzer found `sh -c` scripts read as bash reads them.

DASH_EXPLOIT = "sh -c " + shlex.quote("echo $'\\' ; redis-cli FLUSHALL\necho \\''")


def test_a_command_hidden_by_dash_quoting_is_seen_and_denied(fuzz, sandbox, oracle):
    # Found by the fuzzer (`sh -c "redis-cli $'\\x47ET' k"` ran `redis-cli '$\\x47ET' k`); this is its weapon form:
    # bash reads one quoted word to echo, dash runs FLUSHALL.
    assert not oracle.runs(DASH_EXPLOIT)
    assert not oracle.runs("dash -c " + shlex.quote("redis-cli $'GET' k; echo \\' ; redis-cli FLUSHALL ; echo '"))


@pytest.mark.skipif(shutil.which("dash") is None, reason="needs dash")
@pytest.mark.parametrize("words", ["$'GET' k", "$'a\\' b 'c'", "$\"pods\" x", "a$'b c'd", "'$'x", "\"$'x'\"",
                                   "$'\\x41' \\$'y'"])
def test_a_posix_sh_script_is_read_as_dash_reads_it(words):
    dash = subprocess.run(["dash", "-c", f"set -- {words}; for w; do printf '%s\\0' \"$w\"; done"],
                          capture_output=True, check=True, timeout=30).stdout.decode().split("\0")[:-1]
    assert _bash_argv(as_posix_sh(words)) == dash


def test_foreign_shell_scripts_are_opaque(oracle):
    assert not oracle.runs("fish -c 'redis-cli GET k'")
    assert oracle.runs("bash -c 'redis-cli GET k'") and oracle.runs("sh -c 'redis-cli GET k'")


@pytest.mark.parametrize("text", [
    "ls\n\\rm -rf /var/lib/mysql",  # tree-sitter-bash glued the second line into ls's words; bash runs rm
    "ls\n\\m\\y\\s\\ql <<'EOF'\nDROP TABLE t;\nEOF",  # found by the fuzzer (after `/usr/bin/cp ... hosts.copy`)
    "psql <<'EOF'\nSELECT 1;\nEOF && true;\n# ; DROP TABLE users;\n",  # `EOF && true` does not end the heredoc
    "sh -c 'kubectl {get,} pods'",  # dash runs `kubectl '{get,}' pods`, which is not `kubectl get pods`
])
def test_the_other_bypasses_the_fuzzer_found_are_denied(fuzz, sandbox, oracle, text):
    assert not oracle.runs(text)
    # and what bash would run with it is a command the guard denies (so the reading was the hole)
    out = fuzz.check_one(type("AllowInput", (), {"runs": staticmethod(lambda t: t == text or oracle.runs(t)),
                                                  "call_text": staticmethod(oracle.call_text)})(),
                         sandbox, 0, text, [])
    assert out.executed and out.bypasses


@pytest.mark.parametrize("text", ["ls \\\n-l", "kubectl get pods \\\n  -n prod",
                                  "psql <<'EOF'\nSELECT 1;\nEOF\nkubectl get pods", "sh -c 'kubectl get pods'"])
def test_the_same_shapes_written_as_bash_reads_them_still_run(oracle, text):
    assert oracle.runs(text)


# Found by the fuzzer (seed 1), closed at their cause: each input is denied now, and nothing it makes bash run is
# allowed. The variants go past the examples: other wrappers behind a hung redirect, other stdin redirects after
# it, -0 and -d item splitting, and aliases with their own redirections.
CLOSED_BYPASSES = [
    # an alias's heredoc: its redirections were re-read from text cut where tree-sitter ended the heredoc (#15935)
    "shopt -s expand_aliases\nalias z=psql\nz <<'EOF'\nSELECT 1;\nEOF && true;\n# ; DROP TABLE users;\n",
    "shopt -s expand_aliases\nalias z='psql -X'\nz <<'EOF'\nSELECT 1;\nEOF;\n# ; DROP TABLE users;\n",
    "shopt -s expand_aliases\nalias z=redis-cli\nz <<<FLUSHALL",
    # a `<` redirect inside the command and a heredoc after it: bash reads the last, the heredoc (#17259), and
    # tree-sitter-bash hangs the words after `< file` on the redirect, though bash runs them (`rm -rf`)
    "xargs </dev/null rm -rf <<'EOF'\n/var/lib/mysql\nEOF",
    "xargs -0 -r </dev/null psql -c SEL'ECT 1' $'-f' $'-' <<'EOF'\nDROP TABLE users;\nEOF",
    "xargs -0 -r </dev/null mysql <<EOF\nDROP TABLE t;\nEOF",  # (#23405)
    "xargs -d '\\n' </dev/null rm -rf <<'EOF'\n/var/lib/postgresql/data\nEOF",
    "xargs </dev/null rm -rf <<< /var/lib/mysql",
    "nice </dev/null rm -rf /var/lib/mysql",
    "env </dev/null rm -rf /var/lib/postgresql/data",
    "timeout </dev/null 5 redis-cli FLUSHALL",
    "nohup </dev/null redis-cli FLUSHALL",
]


@pytest.mark.parametrize("text", CLOSED_BYPASSES)
def test_the_bypasses_found_by_the_fuzzer_are_closed(fuzz, sandbox, oracle, text):
    out = fuzz.check_one(oracle, sandbox, 0, text, [])
    assert not out.bypasses and not oracle.runs(text)
    # and bash does run a denied command with it when allowed (so the reading was the hole, not the sandbox)
    lenient = type("AllowInput", (), {"runs": staticmethod(lambda t: t == text or oracle.runs(t)),
                                      "call_text": staticmethod(oracle.call_text)})()
    assert fuzz.check_one(lenient, sandbox, 0, text, []).bypasses


@pytest.mark.parametrize("text", ["cat </dev/null", "sort </dev/null -r", "xargs </dev/null echo <<'EOF'\na b\nEOF",
                                  "shopt -s expand_aliases\nalias z=psql\nz <<'EOF'\nSELECT 1;\nEOF"])
def test_the_same_redirects_around_harmless_commands_still_run(oracle, text):
    assert oracle.runs(text)
