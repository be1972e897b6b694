"""A real Prometheus (the Debian package) on a free loopback port, scraping given targets every 250-500 ms.

Shared by the tests that need one (tests/verifiers/test_prometheus_integration.py,
tests/guardrail/adapters/test_slo_prometheus.py). Skips when the binary is absent; waits on `up == 1` of the job
(a bounded wait on the observed condition, never a fixed sleep); leaves no process behind.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.ports import free_port

__all__ = ["free_port", "running_prometheus"]


@contextlib.contextmanager
def running_prometheus(tmp_path: Path, target_port: int, *, job: str = "loadgen",
                       scrape_interval: str = "500ms", up_within_s: float = 60.0) -> Iterator[str]:
    """Start Prometheus scraping 127.0.0.1:`target_port` as `job`; yields its URL once it has seen it up."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus)")
    from verifiers.clients.prometheus import PrometheusSLISource

    port = free_port()
    timeout = f"{max(100, int(float(scrape_interval.rstrip('ms')) * 0.8))}ms"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""
global: {{scrape_interval: {scrape_interval}, scrape_timeout: {timeout}, evaluation_interval: 1s}}
scrape_configs:
  - job_name: {job}
    static_configs: [{{targets: ["127.0.0.1:{target_port}"]}}]
""")
    log_path = tmp_path / "prometheus.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        source = PrometheusSLISource(url, timeout_s=5)
        deadline = time.time() + up_within_s
        while True:
            try:
                if source.scalar(f'up{{job="{job}"}}') == 1.0:
                    break
            except Exception:
                pass
            if time.time() > deadline or proc.poll() is not None:
                pytest.fail(f"prometheus never saw the exporter up: {log_path.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
