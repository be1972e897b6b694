"""The parts behind `normalise`: the catalogue, the registry, shell words, option parsing, SQL splitting, failure paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardrail.actions import normalise
from guardrail.actions.catalogue import CATALOGUE_PATH, Catalogue, catalogue
from guardrail.actions.classifiers import classifier_for
from guardrail.actions.classifiers.base import OptionSpec
from guardrail.actions.classifiers.sql import counts_only, statements
from guardrail.actions.invocation import component_of_host, runs_code
from guardrail.actions.classifiers.curl import MAX_GLOB, url_globs
from guardrail.actions.shell import parse
from guardrail.actions.words import Word, decode_ansi_c, hidden_commands, word_of
from guardrail.actions.wrappers import WRAPPERS
from guardrail.errors import InputError
from guardrail.yamlio import load_model


def test_catalogue_is_valid_data_and_bad_data_names_file_and_line(tmp_path: Path) -> None:
    cat = catalogue()
    assert "cat" in cat.read_only and cat.kubectl.kinds["deploy"] == "deployment"
    assert cat.redis.kind_of("config get") == "read" and cat.redis.kind_of("FLUSHALL") == "destructive"
    bad = tmp_path / "catalogue.yaml"
    text = CATALOGUE_PATH.read_text().replace("    get: {mutating: false}", "    get: {mutating: sometimes}", 1)
    bad.write_text(text)
    with pytest.raises(InputError) as e:
        load_model(Catalogue, bad)
    assert e.value.path == str(bad) and e.value.line is not None and "mutating" in e.value.message


BRIEF_TOOLS = ["kubectl", "helm", "psql", "mysql", "mariadb", "redis-cli", "curl", "restart-svc.sh",
               "reconfigure-infra.sh", "sed", "tee", "cp", "mv", "rm", "chmod", "truncate", "cat", "ls", "grep",
               "head", "tail", "echo", "jq", "awk", "wc", "sort", "ps", "top", "ss", "netstat", "dig", "nslookup",
               "date", "sleep", "true", "false", "declare_repair_complete"]
BRIEF_WRAPPERS = ["sh", "bash", "kubectl", "xargs", "env", "timeout", "nohup", "watch", "sudo", "eval", "source",
                  ".", "python", "python3", "perl", "node"]


@pytest.mark.parametrize("name", BRIEF_TOOLS)
def test_every_tool_of_the_issue_has_a_classifier(name: str) -> None:
    assert classifier_for(name) is not None


@pytest.mark.parametrize("name", BRIEF_WRAPPERS)
def test_every_wrapper_of_the_issue_is_unwrapped(name: str) -> None:
    assert name in WRAPPERS


@pytest.mark.parametrize("body, want", [
    (r"\x72edis", "redis"), (r"\162edis", "redis"), (r"\u0072edis", "redis"), (r"a\nb", "a\nb"),
    (r"it\'s", "it's"), (r"\cA", "\x01"), (r"\q", "\\q"),
])
def test_ansi_c_strings_decode_as_bash_does(body: str, want: str) -> None:
    assert decode_ansi_c(body) == want


@pytest.mark.parametrize("src, text, dynamic", [
    ("r''edis-cli", "redis-cli", False), ('"redis"-cli', "redis-cli", False), (r"r\edis-cli", "redis-cli", False),
    ("$'\\x72edis-cli'", "redis-cli", False), ('"a\\"b\\$c"', 'a"b$c', False), ("x${IFS}y", "x${IFS}y", True),
    ('"$(date)"', "$(date)", True), ("$HOME/x", "$HOME/x", True),
])
def test_words_are_what_the_shell_would_pass(src: str, text: str, dynamic: bool) -> None:
    node = parse(f"echo {src}").root_node.children[0].child_by_field_name("argument")
    w = word_of(node)
    assert (str(w), w.dynamic) == (text, dynamic)


def _w(*args: str) -> list[Word]:
    return [Word.of(a) for a in args]


def test_option_parsing_handles_clusters_attached_values_and_dashdash() -> None:
    spec = OptionSpec.of(["-X", "-d", "-n", "--namespace"], {"--namespace": "-n"})
    p = spec.parse(_w("-sSfX", "PUT", "-d@body.json", "--namespace=slack", "url", "--", "-x", "y"))
    assert p.flags >= {"-s", "-S", "-f"}
    assert (str(p.get("-X")), str(p.get("-d")), str(p.get("-n"))) == ("PUT", "@body.json", "slack")
    assert [str(x) for x in p.positionals] == ["url"]
    assert [str(x) for x in p.after_dashdash or []] == ["-x", "y"]
    wrapper = OptionSpec.of(["-u"], stop_at_positional=True).parse(_w("-u", "postgres", "psql", "-c", "x"))
    assert [str(x) for x in wrapper.positionals] == ["psql", "-c", "x"]


@pytest.mark.parametrize("host, want", [
    ("svc-channel", ("svc-channel", None)), ("svc-auth.slack.svc.cluster.local", ("svc-auth", "slack")),
    ("svc-auth.slack.svc", ("svc-auth", "slack")), ("api.example.com", ("api.example.com", None)),
    ("10.0.0.1", ("10.0.0.1", None)),
])
def test_component_of_host(host: str, want: tuple[str, str | None]) -> None:
    assert component_of_host(host) == want


def test_sql_splitting_respects_quotes_dollar_quotes_and_comments() -> None:
    sql = """SELECT 'a;b'; -- c;d
    DO $x$ BEGIN PERFORM 1; END $x$; /* ; */ SELECT "we;ird" FROM t; SELECT $$;$$"""
    sts = statements(sql)
    assert [s.kw(0) for s in sts] == ["SELECT", "DO", "SELECT", "SELECT"]
    assert sts[1].toks[1].value == " BEGIN PERFORM 1; END "
    assert "comment" in [t.value for t in statements("SHOW x # not a comment in postgres;")[0].toks]
    assert statements("SHOW x # a comment in mysql", hash_comments=True)[0].toks[-1].value == "x"


def test_a_classifier_bug_becomes_an_unknown_action(monkeypatch: pytest.MonkeyPatch) -> None:
    kubectl = classifier_for("kubectl")

    def boom(inv: object) -> list[object]:
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(kubectl, "classify", boom)
    [action] = normalise("kubectl delete ns slack")
    assert action.mutating == "unknown" and "ZeroDivisionError" in (action.opaque_reason or "")


def test_nesting_beyond_the_limit_is_opaque() -> None:
    actions = normalise("timeout 1 " * 20 + "redis-cli FLUSHALL")
    assert actions and all(a.mutating != False for a in actions)  # noqa: E712 - "unknown" or True, never False
    assert any(a.verb == "nested" for a in actions)


def test_recursive_function_is_cut_off_not_a_crash() -> None:
    actions = normalise("f() { redis-cli FLUSHALL; f; }; f")
    assert any(a.verb == "flushall" for a in actions)
    assert any(a.verb == "nested" and a.mutating == "unknown" for a in actions)


def test_where_a_file_write_lands_depends_on_where_it_runs() -> None:
    [outside] = [a for a in normalise("echo x > /etc/redis.conf") if a.tool == "file"]
    inside = [a for a in normalise("kubectl exec redis-0 -n frappe -- sh -c 'echo x > /etc/redis.conf'")
              if a.tool == "file"][0]
    assert (outside.layer.value, outside.target.kind) == ("declared", "file")
    assert (inside.layer.value, inside.target.kind, inside.target.name) == ("runtime", "pod", "redis-0")
    assert inside.keys[0].key == outside.keys[0].key == "file:/etc/redis.conf"


def test_actions_are_json_for_the_policy_input() -> None:
    [a] = normalise("redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    doc = a.to_input()
    assert doc["mutating"] is True and doc["layer"] == "runtime"
    assert doc["keys"] == [{"key": "redis.maxmemory", "value": "64mb", "scope": {"component": "redis-queue"}}]


@pytest.mark.parametrize("src,splits", [
    ('checked=$(date +%s)', True), ('checked="$(date +%s)"', False), ("'$(x)'", False), ("a$b", True),
    ('"$a $b"', False), ("plain", False),
])
def test_an_unquoted_expansion_splits_a_word(src: str, splits: bool) -> None:
    node = parse(f"echo {src}").root_node.children[0].child_by_field_name("argument")
    assert node is not None and word_of(node).splits is splits


@pytest.mark.parametrize("sql,counts", [
    ("SELECT count(*) FROM messages", True), ("select count(*)::int as n from jobs where status = 'x';", True),
    ("SELECT COUNT(DISTINCT a) FROM t", True), ("SELECT count(*) FROM t UNION SELECT 'a'", False),
    ("SELECT count(*), name FROM t", False), ("SELECT count(*) FROM t; SELECT 'a'", False),
    ("SELECT count(*)::regclass FROM t", False), ("SELECT relname FROM pg_class", False),
])
def test_a_count_query_prints_only_numbers(sql: str, counts: bool) -> None:
    assert counts_only(sql, pg_strings=True) is counts


@pytest.mark.parametrize("name,value,runs", [
    ("PAGER", "cat", False), ("PSQL_PAGER", "", False), ("PAGER", "less -S", False), ("MANPAGER", "more", False),
    ("PAGER", "sh -c id", True), ("PAGER", "less -k/tmp/keys", True), ("PAGER", "$X", True),
    ("MANPAGER", "/tmp/pager", True), ("EDITOR", "cat", True),
])
def test_a_plain_pager_runs_nothing_else(name: str, value: str, runs: bool) -> None:
    assert runs_code(name, value) is runs
@pytest.mark.parametrize("text,found", [
    ("`a b`", [("`", "a b")]),
    ('x $(a "b)" c) y', [("$(", 'a "b)" c')]),
    ("$((x+1))", [("$((", "x+1")]),
    ("`echo \\`x\\``", [("`", "echo `x`")]),
    ("\\$(x) \\`y\\`", []),
    ("'$(x)' # `y`", [("$(", "x"), ("`", "y")]),  # in a heredoc body quotes and # are plain text
    ("`open", None),
])
def test_hidden_commands_finds_what_bash_runs_in_text_the_grammar_reads_as_plain(
        text: str, found: list[tuple[str, str]] | None) -> None:
    assert hidden_commands(text) == found


def test_curl_url_globs_expand_as_curl_does() -> None:
    assert url_globs("http://h/v1/{a,b}") == ["http://h/v1/a", "http://h/v1/b"]
    assert url_globs("http://h/p[08-10]") == ["http://h/p08", "http://h/p09", "http://h/p10"]
    assert url_globs("http://h/[a-e:2]") == ["http://h/a", "http://h/c", "http://h/e"]
    assert url_globs("http://[::1]:80/x") == ["http://[::1]:80/x"]  # an IPv6 host is no range
    assert url_globs("http://h/\\{a,b\\}") == ["http://h/{a,b}"]
    assert url_globs("http://h/[1-1000]") is None and url_globs(f"http://h/[1-{MAX_GLOB}]") is not None


def test_a_url_glob_is_named_on_its_own_urls_only() -> None:
    acts = normalise('curl -X POST "http://a/x{1,2}" http://b/y')
    assert [(a.details.get("path"), a.details.get("url_glob")) for a in acts] == [
        ("/x1", "http://a/x{1,2}"), ("/x2", "http://a/x{1,2}"), ("/y", None)]
