"""Grafana's interpolation of the dashboard's queries (:mod:`tests.dashboard.grafana`), without a server."""

from __future__ import annotations

import pytest

from tests.dashboard import grafana
from tests.dashboard.test_dashboard_live import DASHBOARD


@pytest.mark.parametrize(("range_s", "scrape_s", "expected"), [
    pytest.param(300, 1.0, "4s", id="short-range-four-scrapes"),
    pytest.param(3600, 15.0, "60s", id="grafana-default-scrape-15s"),
    pytest.param(86_400, 15.0, "101400ms", id="long-range-interval-plus-scrape"),
])
def test_rate_interval_is_grafanas_formula(range_s: float, scrape_s: float, expected: str) -> None:
    sent = grafana.interpolate("rate(x[$__rate_interval])", {}, range_s=range_s, scrape_interval_s=scrape_s)
    assert sent == f"rate(x[{expected}])"


def test_a_multi_value_variable_becomes_an_escaped_regex_and_one_value_stays_as_is() -> None:
    expr = 'up{node=~"$node", a="${one}", b="[[one]]"}'
    sent = grafana.interpolate(expr, {"node": ["n-1", "n.2"], "one": ["x"]}, range_s=60, scrape_interval_s=1)
    assert sent == r'up{node=~"(n-1|n\\.2)", a="x", b="x"}'


def test_an_unknown_variable_is_left_for_prometheus_to_refuse() -> None:
    assert grafana.interpolate("up{x=\"$nope\"}", {}, range_s=60, scrape_interval_s=1) == 'up{x="$nope"}'


def test_legend_format_takes_the_series_labels() -> None:
    assert grafana.legend("{{queue}} share ({{ pool }})", {"queue": "a", "pool": "regular"}) == "a share (regular)"
    assert grafana.legend("", {"b": "2", "a": "1"}) == '{a="1", b="2"}'


def test_the_dashboard_has_queries_and_only_variables_grafana_knows() -> None:
    dashboard = grafana.load(DASHBOARD)
    targets = list(grafana.targets(dashboard))
    assert len(targets) >= 20
    known = {"node", "queue"}
    for target in targets:
        sent = grafana.interpolate(target.expr, {name: ["n"] for name in known}, range_s=600, scrape_interval_s=5)
        assert "$" not in sent, (target.panel, sent)
    assert set(grafana.variable_queries(dashboard)) == known
