"""Separate hosts: two supervisors in two network namespaces, one PostgreSQL reachable only over
each namespace's private veth link. One link is cut mid-run: the jobs the cut host held come back
to the other host when their leases expire, the cut host's late results are refused when the link
returns, and nothing is lost."""

from __future__ import annotations

import time
from collections.abc import Iterator

import _journal
import pytest
from _cluster import PrivateCluster, server_bindir
from _netns import Hosts, why_not
from _scenario import Scenario, assert_sound, limits
from faults_app import LIMIT

pytestmark = pytest.mark.slow

JOBS = 1000
LEASE = 3.0
HEARTBEAT = LEASE / 3
OPTIONS = ("--slots", "2", "--concurrency", "4", "--lease", "3s", "--dequeue-timeout", "2s",
           "--grace", "30s")


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    reason = why_not()
    if reason is not None:
        pytest.skip(f"separate hosts need network namespaces: {reason}")
    made = Hosts(2)
    try:
        yield made.create()
    finally:
        made.destroy()


@pytest.fixture
def linked_cluster(hosts: Hosts) -> Iterator[PrivateCluster]:
    bindir = server_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    cluster = PrivateCluster(bindir, listen=",".join(h.host_address for h in hosts.hosts),
                             hba_network=hosts.network).init()
    try:
        cluster.start()
        cluster.create_database()
        yield cluster
    finally:
        cluster.destroy()


def test_a_cut_link_gives_its_capacity_back_at_lease_expiry(hosts, linked_cluster, tmp_path):
    cut_host, other_host = hosts.hosts
    s = Scenario(linked_cluster, tmp_path, "link of one host cut for 2 leases (netns)")
    s.enqueue(JOBS)
    cut = s.worker(*OPTIONS, url=linked_cluster.url(host=cut_host.host_address),
                   prefix=cut_host.prefix())
    other = s.worker(*OPTIONS, url=linked_cluster.url(host=other_host.host_address),
                     prefix=other_host.prefix())
    try:
        cut_slots = set(cut.wait_for_slots(2))
        other_slots = set(other.wait_for_slots(2))
        s.wait_finished(JOBS // 8)
        # Cut while the host is running jobs, so that it holds capacity.
        s.wait_busy(cut_slots)
        cut_host.cut()
        cut_at = time.monotonic()
        time.sleep(2 * LEASE)
        cut_host.restore()
        restored_at = time.monotonic()
        s.wait_all_succeeded(timeout=120)
        # The cut host's hung connections resume (TCP retransmits): its queued outcomes are
        # sent, and refused. Give them a moment before stopping.
        time.sleep(2.0)
    finally:
        codes = s.stop()
    executions = _journal.read(s.journal)
    held = _journal.running_at(executions.values(), cut_at, cut_slots)
    assert held, "the cut host ran nothing at the cut: the test proves nothing"
    # The cut host's handlers run on, but their capacity may be reused once their leases could
    # have expired: they stop counting then.
    expiry = cut_at + LEASE - HEARTBEAT - 0.2
    ends = {e.run: min(e.end or expiry, expiry) for e in held}
    rerun = _journal.rerun_after(executions.values(), [e.token for e in held], cut_at)
    assert rerun is not None, "a job the cut host held never ran again"
    row, seen, found = s.check(limits(), ends=ends, recovery_s=rerun - cut_at)
    assert_sound(row, seen, found, s.logs(), late_pids=cut_slots)
    assert codes == [0, 0], s.logs()
    # Its capacity came back for the other host at lease expiry, not before, not much after.
    assert LEASE - HEARTBEAT - 0.2 <= row.recovery_s < LEASE + 4.0, row.recovery_s
    back = [e for e in executions.values()
            if e.pid in other_slots and rerun <= e.start < restored_at]
    assert _journal.overlap(back, limits()).peak == LIMIT, "the other host never got it all"
    # Only what the cut host had claimed ran twice (a claim whose reply came in just before the
    # cut may start its handler just after it); its late results were refused.
    cut_tokens = {e.token for e in executions.values() if e.pid in cut_slots}
    assert set(found.duplicates) <= cut_tokens | {e.token for e in found.after_done}
    assert found.duplicates, "nothing ran twice: the cut did not outlast a lease"
    assert "result was rejected: its lease had been lost" in cut.output(), s.logs()
