"""`guardrail audit`: reading journals, command lists and OpenAI transcripts; the persistence classifier;
and the CLI end to end with the real normaliser and the embedded OPA engine over the shipped policies/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.actions.model import Action, KeyChange, Layer
from guardrail.audit import DurabilityLedger, UnpersistedChangesCheck, audit, load_trajectory
from guardrail.errors import InputError
from guardrail.journal import Journal
from guardrail.policy.base import Decision, Finding, Outcome
from verifiers.protocols import VerdictStatus

GUARDRAIL = str(Path(sys.executable).parent / "guardrail")


def rt(key, value=None, layer=Layer.RUNTIME, via=()):
    return Action(tool="redis-cli", verb="config set", keys=[KeyChange(key=key, value=value)], layer=layer,
                  mutating=True, via=list(via))


class TableEngine:
    """Denies the verb `flushall`; allows everything else."""

    def decide(self, input):
        if input["action"]["verb"] == "flushall":
            return Decision(Outcome.DENY, "d", denies=(Finding("T-FLUSH", "no flush"),))
        return Decision(Outcome.ALLOW, "a")


def toy_normalise(cmd):
    """`set K V` is a runtime change, `declare K V` a declared one, `flushall` a flush, else a read."""
    w = cmd.split()
    if w[0] == "set":
        return [rt(w[1], w[2])]
    if w[0] == "declare":
        return [rt(w[1], w[2], layer=Layer.DECLARED)]
    if w[0] == "exec-set":
        return [rt(w[1], w[2], via=["kubectl exec"])]
    if w[0] == "boom":
        raise ValueError("unparseable")
    return [Action(tool="shell", verb=w[0], mutating=False)]


# -- the persistence classifier -------------------------------------------------------------------------------


def test_runtime_change_without_a_declared_one_stays_pending():
    led = DurabilityLedger()
    led.record(1, "a", [rt("redis.maxmemory", "64mb")])
    led.record(2, "b", [rt("postgres.work_mem", "64MB")])
    led.record(3, "c", [rt("postgres.work_mem", "64MB", layer=Layer.DECLARED)])
    assert [p.key for p in led.pending()] == ["redis.maxmemory"]
    assert led.made_durable == [{"key": "postgres.work_mem", "step": 3, "runtime_step": 2}]


def test_declared_change_before_the_runtime_one_does_not_make_it_durable():
    led = DurabilityLedger()
    led.record(1, "a", [rt("k", 1, layer=Layer.DECLARED)])
    led.record(2, "b", [rt("k", 2)])
    assert [(p.key, p.value) for p in led.pending()] == [("k", 2)]


def test_in_container_change_is_flagged_even_in_a_declared_layer():
    led = DurabilityLedger()
    new = led.record(1, "kubectl exec ... sed -i", [rt("file:/etc/redis/redis.conf", layer=Layer.DECLARED,
                                                       via=["kubectl exec"])])
    assert new and new[0].in_container


def test_unpersisted_changes_check_reads_the_journal():
    j = Journal(None)
    c = j.append("command", command="redis-cli CONFIG SET maxmemory 64mb", ran=True,
                 actions=[rt("redis.maxmemory", "64mb").to_input()])
    j.append("result", ref=c["seq"], exit_code=0)
    v = UnpersistedChangesCheck().check(None, j)
    assert v.status is VerdictStatus.FAIL and v.code.value == "NOT_DURABLE" and "redis.maxmemory" in v.message
    c = j.append("command", command="edit", ran=True,
                 actions=[rt("redis.maxmemory", "64mb", layer=Layer.DECLARED).to_input()])
    j.append("result", ref=c["seq"], exit_code=0)
    assert UnpersistedChangesCheck().check(None, j).status is VerdictStatus.PASS


# -- the input formats ----------------------------------------------------------------------------------------


def test_command_list_skips_comments_and_keeps_lines(tmp_path):
    f = tmp_path / "cmds.txt"
    f.write_text("# session of 3 June\n\nset a 1\n  # indented comment\nflushall\nread one \\\n  two\n")
    t = load_trajectory(f)
    assert t.format == "commands"
    # A trailing backslash is kept with its newline: the shell's line continuation, one command.
    assert [(s.line, s.command) for s in t.steps] == [(3, "set a 1"), (5, "flushall"), (6, "read one \\\n  two")]


def test_openai_transcript_with_custom_argument_and_malformed_call(tmp_path):
    f = tmp_path / "chat.json"
    f.write_text(json.dumps({"messages": [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "set k 1"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "flush'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "OK"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "bash", "arguments": {"cmd": "flushall"}}},
            {"id": "call_4", "type": "function", "function": {"name": "notes", "arguments": '{"text": "hm"}'}},
        ]},
    ]}, indent=2))
    t = load_trajectory(f, command_arg="cmd")
    assert t.format == "openai"
    assert [s.command for s in t.steps] == ["set k 1", "flushall"]
    finding, other = t.findings
    assert finding["kind"] == "malformed_arguments" and finding["where"] == "messages[1].tool_calls[1]"
    assert finding["line"] and "call_2" in f.read_text().splitlines()[finding["line"] - 1]
    # The other tool's call is not a step, but it is counted: a shell tool with another argument name shows here.
    assert other["kind"] == "no_command_arg" and other["tool"] == "notes" and other["count"] == 1
    assert "text" in other["message"] and "--command-arg" in other["message"]
    report = audit(t, TableEngine(), normaliser=toy_normalise)
    assert [s.outcome for s in report.steps] == ["allow", "deny"]
    assert report.summary()["findings"] == 2


def test_openai_transcript_one_message_per_line(tmp_path):
    """Transcripts are often logged as JSONL: one message object per line."""
    f = tmp_path / "chat.jsonl"
    msgs = [{"role": "user", "content": "fix it"},
            {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "set k 1"}'}}]},
            {"role": "assistant", "tool_calls": "not a list"}]
    f.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    t = load_trajectory(f)
    assert t.format == "openai" and [s.command for s in t.steps] == ["set k 1"]
    assert [x["where"] for x in t.findings] == ["messages[2].tool_calls"]  # not one finding per character


def test_bad_transcript_is_input_error_with_line(tmp_path):
    f = tmp_path / "chat.json"
    f.write_text('{"messages": [\n  {"role": "user",\n  oops}\n]}')
    with pytest.raises(InputError) as e:
        load_trajectory(f, fmt="openai")
    assert e.value.path == str(f) and e.value.line == 3


def test_journal_with_a_torn_tail_is_read_up_to_the_last_complete_record(tmp_path):
    f = tmp_path / "j.jsonl"
    with Journal(f) as j:
        for cmd in ("set a 1", "flushall", "read x"):
            j.append("command", command=cmd, ran=cmd != "flushall", outcome="deny" if cmd == "flushall" else "allow")
    with open(f, "ab") as fh:
        fh.write(b'{"seq":4,"kind":"command","command":"set b')  # a crash mid-write
    t = load_trajectory(f)
    assert t.format == "journal" and t.torn
    assert [s.command for s in t.steps] == ["set a 1", "flushall", "read x"]
    assert t.findings[-1]["kind"] == "torn_tail"
    report = audit(t, TableEngine(), normaliser=toy_normalise)
    # The denied flush did not run, so it changes nothing; the runtime `set a` was never made durable.
    assert [p.key for p in report.unpersisted] == ["a"]
    assert report.to_dict()["would_deny"] == [{"index": 2, "command": "flushall", "rules": ["T-FLUSH"]}]


def test_a_command_the_normaliser_cannot_read_is_an_error_step_not_a_crash(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("boom\nset k 1\n")
    report = audit(load_trajectory(f), TableEngine(), normaliser=toy_normalise)
    assert [s.outcome for s in report.steps] == ["error", "allow"]
    assert report.summary()["errors"] == 1 and report.summary()["unpersisted"] == 1


# -- the CLI, end to end --------------------------------------------------------------------------------------


def cli(*args):
    return subprocess.run([GUARDRAIL, "audit", *args], capture_output=True, text=True, timeout=120)


def test_cli_json_report_with_the_real_pipeline(tmp_path):
    f = tmp_path / "session.txt"
    f.write_text("# an unguarded agent's session\nredis-cli -h 127.0.0.1 -p 6379 CONFIG SET maxmemory 64mb\n"
                 "redis-cli FLUSHALL\nredis-cli GET session:42\n")
    p = cli(str(f), "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["summary"]["steps"] == 3 and rep["summary"]["denied"] == 1
    assert rep["would_deny"] == [{"index": 2, "command": "redis-cli FLUSHALL", "rules": ["SRE-DATA-001"]}]
    assert [(u["key"], u["layer"], u["step"]) for u in rep["unpersisted"]] == [("redis.maxmemory", "runtime", 1)]


def test_cli_table_output(tmp_path):
    f = tmp_path / "session.txt"
    f.write_text("redis-cli FLUSHALL\nredis-cli CONFIG SET maxmemory 64mb\n")
    p = cli(str(f))
    assert p.returncode == 0, p.stderr
    assert "SRE-DATA-001" in p.stdout and "Would have been denied" in p.stdout
    assert "redis.maxmemory" in p.stdout and "summary" in p.stdout


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    f = tmp_path / "chat.json"
    f.write_text('{"messages": [\n  {"role": "user",\n  oops}\n]}')
    p = cli(str(f), "--format", "openai")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert f"{f}:3:" in p.stderr
    missing = cli(str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "nope.txt" in missing.stderr


def test_journal_steps_and_the_torn_tail_report_file_lines(tmp_path):
    f = tmp_path / "j.jsonl"
    f.write_text('{"seq":1,"kind":"session_start"}\n\n{"seq":2,"kind":"command","command":"set a 1","ran":true}\n'
                 '\n\n{"seq":3,"kind":"command","command":"flushall","ran":false}\n{"seq":4,"kind":"comm')
    t = load_trajectory(f)
    assert [(s.command, s.line) for s in t.steps] == [("set a 1", 3), ("flushall", 6)]
    assert t.findings == [{"kind": "torn_tail", "line": 7, "message": t.findings[0]["message"]}]


def test_non_utf8_first_line_is_bad_input_not_a_command_list(tmp_path):
    f = tmp_path / "j.jsonl"
    f.write_bytes(b'\n\xff\xfe{"seq":1,"kind":"command"}\n')
    with pytest.raises(InputError) as e:
        load_trajectory(f)
    assert e.value.path == str(f) and e.value.line == 2 and "UTF-8" in e.value.message
    f.write_bytes(b"redis-cli GET a\nredis-cli GET \xff\n")
    with pytest.raises(InputError) as e:
        load_trajectory(f, fmt="commands")
    assert e.value.line == 2


def test_cli_journal_with_a_non_utf8_last_record_is_audited_as_torn(tmp_path):
    f = tmp_path / "j.jsonl"
    f.write_bytes(b'{"seq":1,"kind":"command","command":"redis-cli FLUSHALL","ran":false}\n\n'
                  b'{"seq":2,"kind":"command","command":"x\xff"}\n')
    p = cli(str(f), "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["summary"]["torn"] is True and rep["steps"][0]["line"] == 1
    assert [(x["kind"], x["line"]) for x in rep["findings"]] == [("torn_tail", 3)]
    f.write_bytes(b"\xff\xfe\n")
    p = cli(str(f))
    assert p.returncode == 2 and p.stderr.strip() == f"error: {f}:1: not UTF-8 text (undecodable byte 0xff)"


def test_cli_bad_format_is_one_line(tmp_path):
    p = cli(str(tmp_path / "x.txt"), "--format", "bogus")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "error: --format: 'bogus' is not one of 'auto', 'journal', 'commands', 'openai', 'claude-code', 'codex'."]


def test_a_continued_line_is_one_command_to_the_real_normaliser(tmp_path):
    from guardrail.actions import normalise

    f = tmp_path / "cmds.txt"
    f.write_text("redis-cli -h redis-queue \\\n  CONFIG SET maxmemory 2gb\n")
    (step,) = load_trajectory(f).steps
    actions = normalise(step.command)
    assert [(a.tool, a.verb, [k.key for k in a.keys]) for a in actions] == [
        ("redis-cli", "config set", ["redis.maxmemory"])]


@pytest.mark.parametrize("text,fmt", [
    ('[ -n "$NS" ] && kubectl get pods -n slack\n', "commands"),
    ("{ kubectl get pods -n slack; }\n", "commands"),
    ("[[ -f x ]] || true\n", "commands"),
    ('{"messages": []}\n', "openai"),
    ("{\n  \"messages\": []\n}\n", "openai"),
    ("[\n  {\"role\": \"user\"}\n]\n", "openai"),
    ("[]\n", "openai"),
])
def test_auto_format_tells_a_command_list_that_starts_with_a_bracket_from_json(tmp_path, text, fmt):
    f = tmp_path / "t.txt"
    f.write_text(text)
    assert load_trajectory(f).format == fmt


def test_a_journalled_command_that_failed_is_not_an_unpersisted_change(tmp_path):
    j = Journal(tmp_path / "j.jsonl", session="s")
    for seq_cmd, code in (("redis-cli CONFIG SET maxmemory 1mb", 1), ("redis-cli CONFIG SET maxclients 50", 0)):
        rec = j.append("command", command=seq_cmd, ran=True, outcome="allow", actions=[])
        j.append("result", ref=rec["seq"], exit_code=code, duration_s=0.0)
    j.close()
    t = load_trajectory(tmp_path / "j.jsonl")
    assert [s.exit_code for s in t.steps] == [1, 0]
    from guardrail.actions import normalise

    report = audit(t, TableEngine(), normaliser=normalise)
    assert [p.key for p in report.unpersisted] == ["redis.maxclients"]


def test_the_table_shows_a_recorded_commands_control_characters_and_brackets_as_text(tmp_path):
    """An ESC sequence in a recorded command reached the terminal raw (clear the screen, set the title, hide the rest
    of the line from the reviewer), and rich read `[/x]` in a command as markup."""
    f = tmp_path / "cmds.txt"
    f.write_text("kubectl get pods \x1b[2J\x1b]0;PWNED\x07 -n default\nkubectl delete pod x\x1b[8m hidden\x1b[0m\n"
                 "echo '[/x] [bold red]y'\n")
    p = cli(str(f), "--format", "commands")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "\\x1b[8m" in p.stdout and "[/x]" in p.stdout


# -- Claude Code and Codex sessions, and the shipped examples -----------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SESSION = ["kubectl get pods -n payments", "redis-cli -h redis-queue CONFIG SET maxmemory 512mb",
           "redis-cli -h redis-queue FLUSHALL"]


@pytest.mark.parametrize("name,fmt", [("claude-code-session.jsonl", "claude-code"), ("codex-rollout.jsonl", "codex"),
                                      ("openai-chat.json", "openai")])
def test_the_shipped_transcripts_are_read_in_their_own_format_detected_automatically(name, fmt):
    """The same session recorded by Claude Code (Bash and the guard's own MCP exec tool), by Codex (a `shell` argv
    through bash -lc, `exec_command`'s cmd) and as an OpenAI chat: the same three commands, FLUSHALL denied."""
    p = cli(str(EXAMPLES / name), "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["format"] == fmt and [s["command"] for s in rep["steps"]] == SESSION
    assert [s["outcome"] for s in rep["steps"]] == ["allow", "warn", "deny"]
    assert rep["would_deny"][0]["rules"] == ["SRE-DATA-001"]
    assert [u["key"] for u in rep["unpersisted"]] == ["redis.maxmemory"]
    assert json.loads(cli(str(EXAMPLES / name), "--json", "--format", fmt).stdout)["steps"] == rep["steps"]


def test_the_shipped_command_list_is_audited():
    rep = json.loads(cli(str(EXAMPLES / "commands.txt"), "--json").stdout)
    assert rep["format"] == "commands" and rep["summary"]["steps"] == 6 and rep["summary"]["denied"] == 1


def test_a_claude_code_bash_call_whose_result_is_an_error_changed_nothing_to_count_on(tmp_path):
    lines = [{"type": "assistant", "message": {"role": "assistant", "content": [
                 {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "set k 1"}},
                 {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "set j 2"}},
                 {"type": "tool_use", "id": "t3", "name": "Edit", "input": {"file_path": "x"}}]}},
             {"type": "user", "message": {"role": "user", "content": [
                 {"type": "tool_result", "tool_use_id": "t1", "content": "Exit code 1", "is_error": True},
                 {"type": "tool_result", "tool_use_id": "t2", "content": "OK"}]}}]
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    t = load_trajectory(f)
    assert t.format == "claude-code" and [(s.command, s.line, s.failed) for s in t.steps] == [
        ("set k 1", 1, True), ("set j 2", 1, False)]
    assert [x["tool"] for x in t.findings] == ["Edit"]  # counted, not audited as a shell command
    report = audit(t, TableEngine(), normaliser=toy_normalise)
    assert [p.key for p in report.unpersisted] == ["j"]


def test_a_codex_call_that_exited_non_zero_changed_nothing_to_count_on(tmp_path):
    items = [{"type": "session_meta", "payload": {"id": "s"}},
             {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": "c1",
                                                   "arguments": json.dumps({"command": ["bash", "-lc", "set k 1"]})}},
             {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1",
                                                   "output": json.dumps({"output": "", "metadata": {"exit_code": 1}})}},
             {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": "c2",
                                                   "arguments": json.dumps({"command": ["set", "j", "two words"]})}}]
    f = tmp_path / "rollout.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in items))
    t = load_trajectory(f)
    assert t.format == "codex" and [(s.command, s.exit_code) for s in t.steps] == [
        ("set k 1", 1), ("set j 'two words'", None)]
    assert [p.key for p in audit(t, TableEngine(), normaliser=toy_normalise).unpersisted] == ["j"]


def test_json_lines_of_no_known_format_are_bad_input_naming_the_first_line_that_fits_none(tmp_path):
    """A file of valid JSON lines said `not a JSON chat transcript: Extra data`."""
    f = tmp_path / "events.jsonl"
    f.write_text('{"event": "start"}\n{"event": "stop"}\n')
    p = cli(str(f))
    assert p.returncode == 2 and p.stderr.strip() == (
        f"error: {f}:1: a JSON line of no transcript format guardrail reads (journal, openai, claude-code, codex); "
        "pass --format, or give one shell command per line")
    claude = (EXAMPLES / "claude-code-session.jsonl").read_text().splitlines()
    f.write_text("\n".join(claude[:3] + ["[1, 2]"] + claude[3:]) + "\n")
    p = cli(str(f))
    assert p.returncode == 2 and p.stderr.startswith(f"error: {f}:4: not a line of the claude-code format (list;")
    f.write_text("\n".join(claude[:3] + ["{oops"] + claude[3:]) + "\n")
    p = cli(str(f))
    assert p.returncode == 2 and p.stderr.startswith(f"error: {f}:4: not a JSON line")
    f.write_text("\n".join(claude) + '\n{"type": "assistant", "mess')  # still being written: a torn last line
    rep = json.loads(cli(str(f), "--json").stdout)
    assert rep["summary"]["torn"] is True and [s["command"] for s in rep["steps"]] == SESSION


@pytest.mark.parametrize("name,fmt", [("claude-code-session.jsonl", "codex"), ("codex-rollout.jsonl", "claude-code"),
                                      ("claude-code-session.jsonl", "openai")])
def test_a_transcript_given_the_wrong_format_is_bad_input_naming_its_first_line(name, fmt):
    p = cli(str(EXAMPLES / name), "--format", fmt)
    assert p.returncode == 2 and p.stderr.startswith(f"error: {EXAMPLES / name}:1: not a line of the {fmt} format")
    assert p.stderr.strip().endswith(f"--format {fmt})")
