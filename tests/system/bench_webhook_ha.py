"""Webhook availability while one of two operator replicas is killed, run on demand (not in CI)::

    .venv/bin/pytest tests/system/bench_webhook_ha.py -q -s -p no:cacheprovider

Two operators with the chart's arguments (``operator.replicas: 2``, peered) behind the stand-in for their
webhook Service (:mod:`tests.system.operator_ha`: round robin per connection over the endpoints that pass the
readiness check every second, no retry of a refused connection). Pods labelled only ``stowage.io/queue:
default`` are created back to back for ``STOWAGE_HA_SECONDS`` (30; ``STOWAGE_HA_REPLICAS`` operators, 2: the
chart's default, 1 for comparison); after ``STOWAGE_HA_KILL_AT`` (10) s the
operator the API server is connected to is SIGKILLed and not restarted (kube-apiserver keeps its connection to
a webhook Service open and reuses it, so one replica takes the calls: killing the idle one would measure
nothing). Reported: creates and
refusals before and after the kill, the longest time without an admitted pod before the kill (the baseline)
and after it, the refusals' messages, and when the stand-in dropped the dead endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.controlplane import ControlPlane
from tests.system.operator_ha import OperatorPair, create_pods_while, longest_gap_s


@pytest.fixture(scope="module")
def pair(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorPair]:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    replicas = int(os.environ.get("STOWAGE_HA_REPLICAS", "2"))
    with OperatorPair(control_plane, tmp_path_factory.mktemp("ha"), release="stowage-ha", replicas=replicas) as stack:
        yield stack


def test_webhook_availability_while_one_operator_is_killed(pair: OperatorPair) -> None:
    total_s = float(os.environ.get("STOWAGE_HA_SECONDS", "30"))
    kill_at_s = float(os.environ.get("STOWAGE_HA_KILL_AT", "10"))
    assert pair.service is not None
    victims: list[str] = []

    def kill() -> None:
        # The replica the API server is connected to: a standby nobody calls would cost nothing.
        victim = pair.busiest()
        victims.append(f"{victim.name} (connections open {pair.service.open}, opened {pair.service.opened})")
        victim.kill()

    with pair.namespace("ha") as ns:
        admissions, killed = create_pods_while(pair, ns, kill_at_s, kill, total_s)
    before = [a for a in admissions if a.sent < killed]
    after = [a for a in admissions if a.sent >= killed]
    dropped = {port: at - killed for port, at in pair.service.removed_at.items()}
    first_admitted = min((a.answered for a in after if not a.error), default=float("nan")) - killed
    print(f"\nwebhook availability, {len(pair.operators)} operators, one SIGKILLed at {kill_at_s:.0f} s "
          f"of {total_s:.0f} s: {victims[0]}")
    print(f"  before the kill: {len(before)} creates, {sum(bool(a.error) for a in before)} refused, "
          f"longest gap between admitted pods {longest_gap_s(before, before[0].sent if before else 0):.2f} s")
    print(f"  after the kill:  {len(after)} creates, {sum(bool(a.error) for a in after)} refused, "
          f"longest gap between admitted pods {longest_gap_s(after, killed):.2f} s, "
          f"first admitted {first_admitted:.2f} s after the kill")
    print("  endpoint dropped by the stand-in Service "
          f"{', '.join(f'{d:.2f} s' for d in dropped.values())} after the kill")
    for a in [a for a in admissions if a.error][:5]:
        print(f"  refused at +{a.sent - killed:.2f} s: {a.error}")
    if len(pair.operators) > 1:
        assert any(not a.error for a in after), "no pod admitted after the kill"
