"""SLO files: Sloth specs load as they are, the native form adds what Sloth cannot say, bad files are exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.errors import InputError
from guardrail.slofile import load_slo_file

GUARDRAIL = str(Path(sys.executable).parent / "guardrail")

# The example spec of Sloth's documentation (pkg.go.dev/github.com/slok/sloth/pkg/prometheus/api/v1), unchanged.
SLOTH_DOCS_EXAMPLE = '''\
version: "prometheus/v1"
service: "k8s-apiserver"
labels:
  cluster: "valhalla"
  component: "kubernetes"
slos:
  - name: "requests-availability"
    objective: 99.9
    description: "Common SLO based on availability for Kubernetes apiserver HTTP request responses."
    sli:
      events:
        error_query: sum(rate(apiserver_request_total{code=~"(5..|429)"}[{{.window}}]))
        total_query: sum(rate(apiserver_request_total[{{.window}}]))
    alerting:
      name: K8sApiserverAvailabilityAlert
      labels:
        category: "availability"
      annotations:
        runbook: "https://github.com/kubernetes-monitoring/kubernetes-mixin/tree/master/runbook.md#alert-name-kubeapierrorshigh"
      page_alert:
        labels:
          severity: critical
      ticket_alert:
        labels:
          severity: warning

  - name: "requests-latency"
    objective: 99
    description: "Common SLO based on latency for Kubernetes apiserver HTTP request responses."
    sli:
      events:
        error_query: |
          (
            sum(rate(apiserver_request_duration_seconds_count{verb!="WATCH"}[{{.window}}]))
            -
            sum(rate(apiserver_request_duration_seconds_bucket{le="0.4",verb!="WATCH"}[{{.window}}]))
          )
        total_query: sum(rate(apiserver_request_duration_seconds_count{verb!="WATCH"}[{{.window}}]))
    alerting:
      name: K8sApiserverLatencyAlert
      labels:
        category: "latency"
      annotations:
        runbook: "https://github.com/kubernetes-monitoring/kubernetes-mixin/tree/master/runbook.md#alert-name-kubeapilatencyhigh"
      page_alert:
        labels:
          severity: critical
      ticket_alert:
        labels:
          disable: true
'''


def test_the_sloth_docs_example_loads_unchanged(tmp_path):
    f = tmp_path / "slo.yaml"
    f.write_text(SLOTH_DOCS_EXAMPLE)
    slos = load_slo_file(f)
    avail, latency = slos.objectives
    assert (avail.name, avail.sli, avail.op) == ("k8s-apiserver-requests-availability", "error_ratio", "<=")
    assert avail.limit == pytest.approx(0.001)  # objective 99.9 %: an error budget of 0.1 %
    assert latency.limit == pytest.approx(0.01)
    assert avail.query == ('((sum(rate(apiserver_request_total{code=~"(5..|429)"}[{{.window}}]))) or vector(0)) / '
                           '(sum(rate(apiserver_request_total[{{.window}}])))')
    assert avail.count_query == "sum(rate(apiserver_request_total[{{.window}}]))" and avail.count_per_s
    assert avail.origin == f"{f}:7" and latency.origin == f"{f}:27"
    assert slos.window_s == 60 and slos.baseline_s == 3600  # the defaults when no native document says


def test_sloths_kubernetes_form_and_the_native_extras_in_one_file(tmp_path):
    f = tmp_path / "slo.yaml"
    f.write_text('''\
apiVersion: sloth.slok.dev/v1
kind: PrometheusServiceLevel
metadata: {name: checkout}
spec:
  service: checkout
  slos:
    - name: availability
      objective: 99.5
      sli: {raw: {error_ratio_query: 'sum(rate(e[{{.window}}])) / sum(rate(t[{{.window}}]))'}}
---
version: guardrail/v1
convergence: {window_s: 30, consecutive: 4, baseline_s: 1800, max_wait_windows: 20}
slos:
  - name: checkout-p99
    latency: {histogram: http_request_duration_seconds_bucket, selector: '{job="checkout"}', quantile: 0.99,
              ceiling_ms: 250}
  - name: checkout-goodput
    throughput: {query: 'sum(rate(http_requests_total{code!~"5.."}[{{.window}}]))', floor_rps: 40}
  - name: jobs
    backlog: {query: 'sum(queue_depth{queue="jobs"})', ceiling: 50}
  - name: api-ready
    ready_replicas: {query: 'sum(kube_deployment_status_replicas_ready{deployment="api"})', min: 3}
  - name: write-errors
    loadgen: {sli: error_ratio, driver: write_readback, max: 0.05}
''')
    slos = load_slo_file(f)
    by = {o.name: o for o in slos.objectives}
    assert by["checkout-availability"].limit == pytest.approx(0.005)
    p99 = by["checkout-p99"]
    assert (p99.sli, p99.op, p99.limit, p99.unit) == ("latency_p99_ms", "<=", 250, "ms")
    assert p99.query == ('histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket'
                         '{job="checkout"}[{{.window}}]))) * 1000')
    assert p99.count_query == 'sum(increase(http_request_duration_seconds_count{job="checkout"}[{{.window}}]))'
    assert (by["checkout-goodput"].sli, by["checkout-goodput"].op) == ("throughput_rps", ">=")
    assert (by["jobs"].sli, by["jobs"].limit) == ("backlog", 50)
    assert (by["api-ready"].sli, by["api-ready"].op, by["api-ready"].limit) == ("ready_replicas", ">=", 3)
    # The loadgen metric names are one preset among others: the same PromQL PrometheusSLISource uses.
    assert 'loadgen_requests_total{driver="write_readback",outcome=~"error|timeout"}' in by["write-errors"].query
    assert slos.criteria() == {"convergence": {"window_s": 30, "baseline_window_s": 1800, "consecutive_cycles": 4,
                                               "max_wait_cycles": 20}}


BAD = [
    ("version: prometheus/v2\nservice: a\nslos: []\n", 1, "version: must be"),
    ('version: "prometheus/v1"\nservice: a\nslos:\n  - name: x\n    objective: 120\n'
     "    sli: {raw: {error_ratio_query: q}}\n", 5, "slos.0.objective"),
    ('version: "prometheus/v1"\nservice: a\nslos:\n  - name: x\n    objective: 99\n'
     "    sli:\n      plugin: {id: sloth-common/availability}\n", 6, "plugins are not supported"),
    ('version: "prometheus/v1"\nservice: a\nslos:\n  - name: x\n    objective: 99\n'
     "    sli: {events: {error_query: q}}\n", 6, "total_query"),
    ("version: guardrail/v1\nslos:\n  - name: a\n    backlog: {query: q}\n    latency: {query: q, ceiling_ms: 5}\n",
     3, "exactly one of"),
    ("version: guardrail/v1\nslos:\n  - name: a\n    latency: {histogram: h_bucket, ceiling_ms: 5}\n", 4,
     "needs its quantile"),
    ("version: guardrail/v1\nconvergence: {window_s: 0}\nslos: []\n", 2, "window_s"),
    ("version: guardrail/v1\nslos:\n  - name: a\n    throughput: {query: q, floor_rps: 1, extra: 2}\n", 4,
     "extra"),
    ("version: guardrail/v1\nslos:\n  - name: a\n    backlog: {query: q}\n  - name: a\n    backlog: {query: q}\n",
     5, "given twice"),
    ("version: guardrail/v1\nslos:\n  - name: a\n    backlog: {query: 'x{{.range}}'}\n", 3, "only template"),
    ("version: guardrail/v1\nslos: []\n", 1, "no SLOs"),
    ("slos: [\n", 2, "bad YAML"),
    ("version: guardrail/v1\nslos:\n  - &a {name: a, backlog: {query: q}}\n  - *a\n", 3, "aliases"),
]


@pytest.mark.parametrize("text,line,words", BAD, ids=[b[2] for b in BAD])
def test_a_bad_slo_file_names_its_line(tmp_path, text, line, words):
    f = tmp_path / "slo.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_slo_file(f)
    assert e.value.line == line, e.value.one_line()
    assert words in str(e.value)


def test_cli_refuses_a_bad_slo_file_with_exit_2_and_file_line_before_starting(tmp_path):
    f = tmp_path / "slo.yaml"
    f.write_text(BAD[1][0])
    for args in (["mcp", "--env", "local"], ["shell"]):
        tail = ["--", "true"] if args == ["shell"] else []
        proc = subprocess.run([GUARDRAIL, *args, "--prometheus", "http://127.0.0.1:9", "--slo", str(f), *tail],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"error: {f}:5: slos.0.objective: Input should be less than 100"]
        assert not (tmp_path / "guardrail-journals").exists() or not any((tmp_path / "guardrail-journals").iterdir())


def test_cli_needs_prometheus_for_an_slo_file_and_an_http_url(tmp_path):
    f = tmp_path / "slo.yaml"
    f.write_text(SLOTH_DOCS_EXAMPLE)
    proc = subprocess.run([GUARDRAIL, "mcp", "--slo", str(f)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "--slo: needs --prometheus URL" in proc.stderr
    proc = subprocess.run([GUARDRAIL, "mcp", "--prometheus", "prometheus:9090", "--slo", str(f)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "--prometheus: 'prometheus:9090' is not an http(s) URL" in proc.stderr


def test_the_shipped_example_loads():
    slos = load_slo_file(Path(__file__).resolve().parents[2] / "examples" / "slo.yaml")
    kinds = {o.sli for o in slos.objectives}
    assert {"error_ratio", "latency_p99_ms", "throughput_rps", "backlog", "ready_replicas", "goodput"} <= kinds
    assert slos.consecutive == 3 and slos.window_s == 60
