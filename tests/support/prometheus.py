"""A real Prometheus server (Debian package) for tests, scraping targets on loopback.

Usage::

    with prometheus_server(tmp_path, ["127.0.0.1:9808"], scrape_interval_s=1.0) as url:
        series = wait_for_query(url, 'stowage_node_usage{resource="cpu"}')

The binary is looked up as ``$PROMETHEUS`` or ``prometheus`` on PATH. When it is
missing the calling test is skipped locally and FAILS under CI (``CI=true``),
because CI installs it and a silent skip would hide a broken install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.processes import stop_process, wait_for_logged_port

__all__ = ["prometheus_binary", "prometheus_server", "query", "wait_for_query"]


def prometheus_binary() -> str:
    """Path of the prometheus binary; skip (or fail under CI) when absent."""
    path = (
        os.environ.get("PROMETHEUS")
        or shutil.which("prometheus")
        or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)
    )
    if path is None:
        message = "prometheus binary not found (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@contextlib.contextmanager
def prometheus_server(
    workdir: Path, targets: list[str], scrape_interval_s: float = 1.0, startup_timeout_s: float = 60.0,
    extra_scrape_configs: list[dict[str, Any]] | None = None, rule_files: list[Path] | None = None,
) -> Iterator[str]:
    """Run Prometheus scraping ``targets`` (``host:port``) and yield its base URL; stop it afterwards.

    ``extra_scrape_configs``: more Prometheus ``scrape_configs`` entries (other jobs, paths, https targets);
    ``rule_files``: recording and alerting rule files it evaluates at the scrape interval.
    """
    binary = prometheus_binary()
    workdir = Path(workdir) / "prometheus"
    workdir.mkdir(parents=True, exist_ok=True)
    interval = f"{max(int(scrape_interval_s * 1000), 100)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": "stowage-test", "static_configs": [{"targets": list(targets)}]},
                           *(extra_scrape_configs or [])],
        "rule_files": [str(f) for f in rule_files or ()],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    log_path = workdir / "prometheus.log"
    log = log_path.open("wb")
    # Port 0, then the port Prometheus logs ("Listening on" names the bound address): a port picked
    # here and bound later by the child could be taken in between.
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            "--web.listen-address=127.0.0.1:0",
            "--log.level=info",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + startup_timeout_s
        port = wait_for_logged_port(proc, log_path, r'msg="Listening on" address=127\.0\.0\.1:(\d+)', startup_timeout_s)
        url = f"http://127.0.0.1:{port}"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {proc.returncode}: {log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready after {startup_timeout_s}s")
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc, timeout_s=10)
        log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """Run an instant query; return ``data.result`` (raises on an API error)."""
    response = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5.0)
    response.raise_for_status()
    body = response.json()
    if body.get("status") != "success":
        raise RuntimeError(f"query {promql!r} failed: {body}")
    return list(body["data"]["result"])


def wait_for_query(url: str, promql: str, timeout_s: float = 60.0, min_series: int = 1) -> list[dict[str, Any]]:
    """Poll ``promql`` until it returns at least ``min_series`` series; fail the test after ``timeout_s``.

    ``timeout_s`` only bounds how long a broken test hangs (generous: scrapes and samples stall on a
    loaded machine); it is not a timing assertion.

    Rate-derived series (cpu, disk, network) appear one sample after the others, so a caller that
    checks a whole set must ask for all of it rather than take the first non-empty answer.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = query(url, promql)
        if len(result) >= min_series:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{len(result)} of {min_series} series for {promql!r} after {timeout_s}s: {result}")
        time.sleep(0.25)
