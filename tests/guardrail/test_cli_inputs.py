"""Bad input to `guardrail shell` and `guardrail mcp` (journals, ports, criteria): one line, exit 2, and nothing
written. The real CLI in a subprocess; every case fails at start, before an agent or server runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.adapters.session import load_criteria
from guardrail.errors import InputError

GUARDRAIL = str(Path(sys.executable).parent / "guardrail")


def run(*args, cwd=None):
    return subprocess.run([GUARDRAIL, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def one_line(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


# -- shell --journal --------------------------------------------------------------------------------------------


def test_shell_journal_under_a_regular_file_is_one_line_exit_2(tmp_path):
    (tmp_path / "f").write_text("")
    j = tmp_path / "f" / "j.jsonl"
    p = run("shell", "--journal", str(j), "--", "true")
    assert p.returncode == 2
    assert one_line(p).startswith(f"error: --journal: {j}: cannot create journal directory")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_shell_journal_that_cannot_be_opened_is_one_line_exit_2(tmp_path):
    p = run("shell", "--journal", "/proc/self/j.jsonl", "--", "true")  # a directory no file can be made in
    assert p.returncode == 2
    assert one_line(p).startswith("error: --journal: /proc/self/j.jsonl: cannot open journal")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_shell_journal_in_an_unwritable_directory_is_one_line_exit_2(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        p = run("shell", "--journal", str(d / "j.jsonl"), "--", "true")
    finally:
        d.chmod(0o700)
    assert p.returncode == 2 and one_line(p).startswith(f"error: --journal: {d / 'j.jsonl'}: cannot open journal")


def test_shell_that_cannot_start_its_agent_appends_nothing_to_the_journal(tmp_path):
    j = tmp_path / "j.jsonl"
    j.write_text('{"seq":1,"kind":"session_start","session":"j"}\n')
    before = j.read_bytes()
    p = run("shell", "--journal", str(j), "--", "no-such-agent-guardrail-test")
    assert p.returncode == 2
    assert one_line(p) == "error: no-such-agent-guardrail-test: cannot start: command not found on PATH"
    (tmp_path / "plain").write_text("")  # exists, not executable
    p = run("shell", "--journal", str(j), "--", str(tmp_path / "plain"))
    assert p.returncode == 2 and "not an executable file" in one_line(p)
    assert j.read_bytes() == before


def test_shell_journal_must_be_jsonl(tmp_path):
    p = run("shell", "--journal", str(tmp_path / "j.txt"), "--", "true")
    assert p.returncode == 2 and one_line(p) == "error: --journal: must name a .jsonl file"
    assert not (tmp_path / "j.txt").exists()


# -- mcp ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_mcp_port_out_of_range_is_one_line_exit_2(port):
    p = run("mcp", "--transport", "http", "--port", port)
    assert p.returncode == 2
    assert one_line(p) == f"error: --port: {port} is not in the range 0<=x<=65535."


def test_mcp_journal_dir_that_cannot_be_made_fails_at_start(tmp_path):
    (tmp_path / "f").write_text("")
    p = run("mcp", "--journal-dir", str(tmp_path / "f" / "journals"))
    assert p.returncode == 2
    assert one_line(p) == f"error: --journal-dir: {tmp_path / 'f' / 'journals'}: not a directory"
    p = run("mcp", "--journal-dir", str(tmp_path / "f"))  # click's own check, on one line too
    assert p.returncode == 2 and one_line(p).startswith("error: --journal-dir: ")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_mcp_unwritable_journal_dir_fails_at_start():
    p = run("mcp", "--journal-dir", "/proc/self")
    assert p.returncode == 2 and one_line(p).startswith("error: --journal-dir: /proc/self: cannot write")


def test_mcp_bad_criteria_fails_at_start_naming_the_line(tmp_path):
    c = tmp_path / "criteria.yaml"
    c.write_text("convergence:\n  max_wait_cycles: 4\n  default_cycle_s: -30\n")
    p = run("mcp", "--criteria", str(c), "--journal-dir", str(tmp_path / "j"))
    assert p.returncode == 2
    assert one_line(p) == f"error: {c}:3: convergence.default_cycle_s: Input should be greater than 0"
    assert not (tmp_path / "j").exists()  # nothing made for a start that failed


# -- criteria -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,line,words", [
    ("convergence: {default_cycle_s: -30}\n", 1, "convergence.default_cycle_s: Input should be greater than 0"),
    ("convergence:\n  max_wait_cycles: 0\n", 2, "convergence.max_wait_cycles: Input should be greater than 0"),
    ("convergence:\n  consecutive_cycles: 3\n  bogus: 1\n", 3, "convergence.bogus: Extra inputs are not permitted"),
    ("watchdog:\n  max_distinct_ratio: 2\n", 2, "watchdog.max_distinct_ratio"),
    ("restart:\n  targets: some\n", 2, "restart.targets"),
    ("restart: {}\nconvergance: {}\n", 2, "unknown criteria section 'convergance'"),
    ("convergence:\n  count: 2\n  count: 3\n", 3, "duplicate key 'count'"),
])
def test_bad_criteria_name_the_line(tmp_path, text, line, words):
    c = tmp_path / "criteria.yaml"
    c.write_text(text)
    with pytest.raises(InputError) as e:
        load_criteria(c)
    assert e.value.line == line and words in e.value.message, e.value.one_line()


def test_good_criteria_load_with_their_types(tmp_path):
    c = tmp_path / "criteria.yaml"
    c.write_text("convergence: {default_cycle_s: 30, max_wait_cycles: 4, interval_s: null}\nrestart:\n"
                 "watchdog: {check_slis: false}\n")
    assert load_criteria(c) == {"convergence": {"default_cycle_s": 30.0, "max_wait_cycles": 4.0, "interval_s": None},
                                "watchdog": {"check_slis": False}}
    from verifiers.criteria import Criteria

    assert Criteria.coerce(load_criteria(c)).convergence.max_wait_cycles == 4.0


# -- the root group ---------------------------------------------------------------------------------------------


def test_usage_errors_of_every_command_are_one_line_and_help_still_works(tmp_path):
    p = run("scenarios", "--zzz")  # a command added from the entry-point group (arena) is below the root too
    assert p.returncode == 2 and one_line(p) == "error: No such option '--zzz'."
    p = run("audit")
    assert p.returncode == 2 and one_line(p) == "error: Missing argument 'TRAJECTORY'."
    p = run("mcp", "--help")
    assert p.returncode == 0 and p.stdout.startswith("Usage: guardrail mcp") and "0 picks a free one" in p.stdout


# -- from the CLI review of 4 December ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["", "   ", "\t\n"])
def test_check_of_an_empty_command_is_bad_input_not_an_allow(command):
    p = run("check", "--", command)
    assert p.returncode == 2 and "COMMAND" in one_line(p) and p.stdout == ""


def test_mcp_over_stdio_with_stdin_closed_is_one_line_exit_2(tmp_path):
    p = subprocess.run([GUARDRAIL, "mcp", "--journal-dir", str(tmp_path / "j")], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL, pass_fds=(), preexec_fn=lambda: os.close(0))
    assert p.returncode == 2 and "stdin" in one_line(p)


def test_a_scenario_dir_that_is_not_there_is_bad_input(tmp_path):
    env = {**os.environ, "GUARDRAIL_SCENARIO_DIR": str(tmp_path / "nowhere")}
    for args in (["scenarios", "list"], ["bench", "--seeds", "1", "--out", str(tmp_path / "b")]):
        p = subprocess.run([GUARDRAIL, *args], capture_output=True, text=True, timeout=120, env=env,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 2 and "GUARDRAIL_SCENARIO_DIR" in one_line(p), args
    assert not (tmp_path / "b").exists()


def test_policy_eval_of_an_input_nested_thousands_deep_is_one_line_exit_2(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" * 5000 + "]" * 5000)
    p = run("policy", "eval", "--input", str(f), "--query", "input")
    assert p.returncode == 2 and "nested too deeply" in one_line(p)


def test_bench_finds_a_directory_where_its_summary_goes_before_any_episode(tmp_path):
    out = tmp_path / "b"
    (out / "summary.json").mkdir(parents=True)
    (out / "results.jsonl").write_text('{"old": "row"}\n')
    p = run("bench", "--scenarios", "ia-011", "--agents", "replay:reference", "--seeds", "1", "--out", str(out))
    assert p.returncode == 2 and "summary.json" in one_line(p)
    assert (out / "results.jsonl").read_text() == '{"old": "row"}\n'


def test_live_bench_with_an_unknown_agent_fails_before_it_writes_anything(tmp_path):
    out = tmp_path / "bl"
    out.mkdir()
    (out / "results.jsonl").write_text('{"old": "row"}\n')
    p = run("bench", "--env", "live", "--scenarios", "ia-006", "--agents", "replay:nope", "--out", str(out))
    if p.returncode == 3:
        pytest.skip(f"the live stack's servers are not installed: {p.stderr.strip()}")
    assert p.returncode == 2 and "nope" in one_line(p) and p.stdout == ""
    assert (out / "results.jsonl").read_text() == '{"old": "row"}\n'


def test_bench_with_an_empty_out_is_bad_input_and_writes_nothing(tmp_path):
    p = run("bench", "--scenarios", "ia-011", "--agents", "replay:reference", "--seeds", "1", "--out", "",
            cwd=tmp_path)
    assert p.returncode == 2 and "--out" in one_line(p)
    assert list(tmp_path.iterdir()) == []


def test_a_result_with_stdout_closed_is_an_error_not_a_silent_success():
    p = subprocess.run([GUARDRAIL, "check", "--", "kubectl get pods -n slack"], capture_output=False, text=True,
                       timeout=120, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       preexec_fn=lambda: os.close(1))
    assert p.returncode == 2 and "stdout is closed" in p.stderr


def test_a_venv_without_the_opa_engine_says_how_to_install_it():
    import subprocess
    import sys
    # The engine's package hidden from the import system, as in a venv built with `pip install -e .` alone.
    code = ("import builtins, sys\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name.split('.')[0] == 'opa_bindings':\n"
            "        raise ModuleNotFoundError(\"No module named 'opa_bindings'\", name='opa_bindings')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "from guardrail.cli import main\n"
            "main(sys.argv[1:])\n")
    r = subprocess.run([sys.executable, "-c", code, "check", "--", "kubectl get pods"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [
        "error: the OPA engine is not installed: pip install --ignore-requires-python "
        "opa-golib-python-bindings==0.4.4 (or `make venv`)"]


@pytest.mark.parametrize("text,line,field", [
    ("id: x\nceilings:\n  app.pool_size: .nan\n", 3, "ceilings.app.pool_size"),
    ("id: x\nslos:\n  - {sli: error_ratio, op: '<=', value: .inf}\n", 3, "slos.0.value"),
    ("id: x\nconstraints:\n  - {id: c, text: t, kind: ceiling, value: -.inf}\n", 3, "constraints.0.value"),
    ("id: x\nextra:\n  a: [1, .nan]\n", 2, "extra"),
])
def test_a_context_with_nan_or_infinity_is_bad_input_naming_the_line(tmp_path, text, line, field):
    """NaN and infinities have no JSON form: a context holding one reached OPA as bad JSON, and every change was
    denied with "retry in a moment"."""
    f = tmp_path / "ctx.yaml"
    f.write_text(text)
    p = run("check", "--context", str(f), "--", "kubectl get pods")
    assert p.returncode == 2
    assert one_line(p).startswith(f"error: {f}:{line}: {field}:"), p.stderr


@pytest.mark.parametrize("args", [["check", "--contxt", "x.yaml", "--", "ls"], ["check", "--jsn", "--", "ls"],
                                  ["shell", "--contxt", "x.yaml", "--", "true"]])
def test_a_mistyped_option_before_the_double_dash_is_a_usage_error_not_part_of_the_command(args):
    """It was taken as the command's first words: `check --contxt ctx.yaml -- ls` dropped the context and denied
    `--contxt ctx.yaml ls` as an unknown program (exit 1; exit 0 under --mode dry-run)."""
    p = run(*args)
    assert p.returncode == 2
    assert "No such option" in one_line(p)
