"""Fuzzing `normalise`: it never raises, and opaque text is never classified read-only."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from guardrail.actions import UNKNOWN, Action, normalise

CORPUS = [e["cmd"] for e in yaml.safe_load(Path(__file__).with_name("corpus.yaml").read_text())]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CHARS = list("abcdefghijklmnopqrstuvwxyz -_=./0123456789$(){}[]|&;<>'\"`\\\n\t#*!~%@,:+^\x00é\U0001F600")
TOKENS = ["eval ", "sh -c ", "<<EOF\n", "\nEOF\n", "$(", "${", "kubectl ", "redis-cli ", "psql -c ", "base64 -d",
          "| sh", "<<< ", "kubectl exec p -- ", "xargs ", "'", '"']
SHELLISH = st.lists(st.sampled_from(CHARS + TOKENS), max_size=60).map("".join)


def _well_formed(actions: list[Action]) -> None:
    assert isinstance(actions, list)
    for a in actions:
        assert isinstance(a, Action)
        assert a.mutating in (True, False, UNKNOWN)
        if a.opaque_reason is not None:
            # A reason to distrust an action never sits on one that claims to be read-only.
            assert a.mutating is not False, a
        a.model_dump_json()  # every action is JSON-serialisable for the policy input and the journal


@FUZZ
@given(SHELLISH)
@example("'")
@example('"$(')
@example("<<EOF")
@example("f() { f; }; f")
@example("alias a=a; a")
@example("sh -c " * 40 + "x")
def test_random_shell_text_never_raises(text: str) -> None:
    _well_formed(normalise(text))


@FUZZ
@given(st.sampled_from(CORPUS), st.data())
def test_truncated_corpus_commands_never_raise(cmd: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=max(len(cmd), 0)))
    start = data.draw(st.integers(min_value=0, max_value=cut))
    _well_formed(normalise(cmd[:cut]))
    _well_formed(normalise(cmd[start:cut]))


@FUZZ
@given(st.binary(max_size=80))
def test_arbitrary_bytes_never_raise(blob: bytes) -> None:
    _well_formed(normalise(blob.decode("utf-8", "surrogateescape")))


def test_non_text_input_is_opaque_not_an_exception() -> None:
    # Non-text is read as its text: str(["ls"]) is "['ls']", which bash runs as the glob `[ls]`.
    for bad in (None, 42, b"redis-cli FLUSHALL", ["ls"]):
        actions = normalise(bad)  # type: ignore[arg-type]
        _well_formed(actions)
        assert actions and all(a.mutating is not False for a in actions), bad


def test_a_bracket_glued_to_a_word_is_a_glob_command_not_a_test() -> None:
    for cmd in ("[ls]", "[ls] && echo ok", "[-f x ]", "[$(id)]", "[\\ls]", "[\\\nls]"):
        assert any(a.mutating is UNKNOWN and "glob" in (a.opaque_reason or "") for a in normalise(cmd)), cmd
    for cmd in ("[ -f x ]", "[[ -f x ]]", '[ "$a" = b ]', "[\t-n x ]", "[[( -f x )]]", "[\\\n -f x ]"):
        assert normalise(cmd) == [], cmd


# ---- opaque constructs, wherever they sit in a command line ------------------------------------------------------

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./=", min_size=1, max_size=12)
BENIGN = st.sampled_from(["ls -la", "kubectl get pods -n slack", "echo ok", "sleep 5", "cat /etc/hosts",
                          "redis-cli INFO", "psql -c 'select 1'", "date", "true", "grep x /tmp/y"])
SEP = st.sampled_from(["; ", " && ", " || ", "\n", " | ", " & "])
VAR = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@st.composite
def opaque_snippet(draw: st.DrawFn) -> str:
    words = " ".join(draw(st.lists(WORD, max_size=4)))
    payload = base64.b64encode(draw(st.sampled_from(
        [b"redis-cli FLUSHALL", b"kubectl delete ns slack", b"psql -c 'DROP TABLE messages'", b"ls"]))).decode()
    shell = draw(st.sampled_from(["sh", "bash", "dash", "zsh", "/bin/sh", "busybox sh"]))
    decoder = draw(st.sampled_from(["base64 -d", "base64 --decode", "xxd -r -p", "rev", "openssl base64 -d",
                                    "gunzip"]))
    forms = [
        f"eval {words}",
        f"eval \"$({words or 'x'})\"",
        f"echo {payload} | {decoder} | {shell}",
        f"{decoder} <<< {payload} | {shell}",
        f"{shell} -c \"$(echo {payload} | {decoder})\"",
        f"${draw(VAR)} {words}",
        f"${{{draw(VAR)}}} {words}",
        f"$({words or 'x'}) {words}",
        f"`{words or 'x'}` {words}",
        f"{draw(st.sampled_from(['python3', 'python', 'perl', 'node', 'ruby']))} "
        f"{draw(st.sampled_from(['-c', '-e']))} 'x'",
        f"source {words or 'f'}",
        f". {words or 'f'}",
        f"kubectl exec pod-0 -- {shell} -c \"$(echo {payload} | {decoder})\"",
        f"kubectl exec pod-0 -n ns -- eval {words}",
        f"sudo ${draw(VAR)} {words}",
        f"xargs ${draw(VAR)}",
        f"echo {words or 'x'} > /dev/tcp/{draw(WORD)}/6379",
        f"curl -s {draw(st.sampled_from(['gopher', 'dict', 'telnet']))}://{draw(WORD)}:6379/_{words or 'x'}",
        f"kubectl run t --image=x -- eval {words}",
    ]
    return draw(st.sampled_from(forms))


@FUZZ
@given(st.lists(BENIGN, max_size=2), SEP, opaque_snippet(), SEP, st.lists(BENIGN, max_size=2))
def test_opaque_construct_is_never_read_only(before: list[str], sep1: str, snippet: str, sep2: str,
                                             after: list[str]) -> None:
    text = sep1.join(before + [snippet]) if before else snippet
    if after:
        text = text + sep2 + sep2.join(after)
    actions = normalise(text)
    _well_formed(actions)
    assert any(a.mutating is not False for a in actions), (text, [(a.tool, a.verb, a.mutating) for a in actions])


@FUZZ
@given(opaque_snippet(), st.sampled_from(["sh -c {q}", "bash -c {q}", "timeout 5 sh -c {q}", "nohup bash -c {q}",
                                          "kubectl exec p -- sh -c {q}", "env A=1 bash -c {q}", "watch {q}"]))
def test_opaque_construct_inside_a_wrapper_is_never_read_only(snippet: str, wrapper: str) -> None:
    quoted = "'" + snippet.replace("'", "'\"'\"'") + "'"
    text = wrapper.format(q=quoted)
    actions = normalise(text)
    assert any(a.mutating is not False for a in actions), (text, [(a.tool, a.verb, a.mutating) for a in actions])


def test_normalise_is_deterministic() -> None:
    for cmd in CORPUS[:50]:
        assert [a.model_dump() for a in normalise(cmd)] == [a.model_dump() for a in normalise(cmd)]
