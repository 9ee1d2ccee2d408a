"""fabric.bandwidth and fabric.speed on recorded output: which rail is degraded, and why.

The lab's probes (tests/unit/recorded/bandwidth/, iperf3's own -J documents) are real runs over
the lab's veths, healthy and with the degraded-rail fault on (the rail shaped to 1000 Mb/s, its
speed file nominal). The real-hardware cases use the figures NVIDIA/dgx-spark-playbooks PR #108
published for DGX Sparks: a degraded ConnectX-7 at 12.86 Gb/s over TCP (13.23 with ib_write_bw)
while ethtool says 200000Mb/s, and healthy rails at 92.57 and 97.28 Gb/s per logical interface.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from test_checks import INV, RAIL, H, O, W, by, edit, failing, run, sections

from sparkctl.facts import bandwidth

REC = Path(__file__).parent / "recorded" / "bandwidth"
TWIN = "enP2p1s0f0np0"


def probes(name: str) -> dict:
    doc = json.loads((REC / f"{name}.json").read_text())
    return {key: bandwidth.parse_iperf(v["rc"], v["out"]) for key, v in doc.items()}


def bw(results, host: str, device: str):
    return by(results, "fabric.bandwidth", host, device)


def physical(secs: dict) -> dict:
    """The recording as a real Spark would report it: every rail has a bus device."""
    secs = copy.deepcopy(secs)
    for host in secs:
        speeds = secs[host].get("speeds")
        if speeds:
            speeds["out"] = speeds["out"].replace(" virtual", " physical")
    return secs


def figures(**gbps: float) -> dict:
    """Probe results with these figures (rail key with '/' spelled '__')."""
    return {k.replace("__", "/"): bandwidth.BandwidthResult(gbps=v) for k, v in gbps.items()}


def test_parse_the_recorded_probe():
    healthy = probes("healthy")
    assert set(healthy) == {f"{H}/{RAIL}", f"{H}/{TWIN}", f"{H}/enp1s0f1np1", f"{W}/enp1s0f1np1"}
    assert all(r.error is None and r.gbps > 5 and r.streams == bandwidth.STREAMS for r in healthy.values())
    assert round(probes("degraded")[f"{H}/{RAIL}"].gbps, 1) == 1.0


def test_healthy_lab_rails_pass_on_both_ends():
    results = run(bandwidth=probes("healthy"))
    assert failing(results) == set()
    rails = [r for r in results if r.name == "fabric.bandwidth"]
    # every rail judged at each of its ends: 4 rails, 8 results
    assert len(rails) == 8 and all(r.status == "ok" for r in rails)
    assert "of its twin head:enP2p1s0f0np0" in bw(results, W, RAIL).message
    assert "of its sibling worker:enp1s0f1np1" in bw(results, O, "enp65s0f0np0").message


def test_degraded_lab_rail_is_named_at_both_ends_while_its_speed_file_says_200():
    results = run(bandwidth=probes("degraded"))
    assert failing(results) == {("fabric.bandwidth", H, RAIL), ("fabric.bandwidth", W, RAIL)}
    assert by(results, "fabric.speed", W, RAIL).status == "ok"  # sysfs: nominal, as on the real card
    bad = bw(results, W, RAIL)
    assert "carries 1.0 Gb/s" in bad.message and "of its twin head:enP2p1s0f0np0" in bad.message
    assert bad.message.endswith(": degraded") and bad.data["sibling_gbps"] > 5
    assert "mlxfwreset" in bad.fix and "ib_write_bw -d rocep1s0f0" in bad.fix
    assert bad.runbook == "docs/runbooks/fabric.bandwidth.md"
    assert bw(results, W, TWIN).status == "ok"


def test_real_spark_twins_pr108_figures():
    secs = physical(sections())
    # the degraded twin beside a healthy one: 14% of its twin, 6% of the link
    results = run(secs, bandwidth=figures(head__enp1s0f0np0=12.86, head__enP2p1s0f0np0=92.57,
                                          head__enp1s0f1np1=36.0, worker__enp1s0f1np1=35.0))  # fmt: skip
    assert failing(results) == {("fabric.bandwidth", H, RAIL), ("fabric.bandwidth", W, RAIL)}
    assert "6% of the link" in bw(results, H, RAIL).message
    # both healthy: about the same, and a fair share of 200 Gb/s
    results = run(secs, bandwidth=figures(head__enp1s0f0np0=92.57, head__enP2p1s0f0np0=97.28,
                                          head__enp1s0f1np1=36.0, worker__enp1s0f1np1=35.0))  # fmt: skip
    assert failing(results) == set() and {r.status for r in results if r.name == "fabric.bandwidth"} == {"ok"}
    # both twins capped alike: no twin can tell, the link's nominal speed does
    results = run(secs, bandwidth=figures(head__enp1s0f0np0=12.86, head__enP2p1s0f0np0=13.23,
                                          head__enp1s0f1np1=36.0, worker__enp1s0f1np1=35.0))  # fmt: skip
    assert ("fabric.bandwidth", H, TWIN) in failing(results)
    assert "below 13% of the link" in bw(results, H, TWIN).message
    # PR #108's band of a degraded card reaches 25 Gb/s: still a failure on both twins
    results = run(secs, bandwidth=figures(head__enp1s0f0np0=24.0, head__enP2p1s0f0np0=25.0,
                                          head__enp1s0f1np1=36.0, worker__enp1s0f1np1=35.0))  # fmt: skip
    assert {("fabric.bandwidth", H, RAIL), ("fabric.bandwidth", H, TWIN)} <= failing(results)


def test_a_healthy_rail_through_a_single_threaded_iperf3_is_ok():
    # one core drives all streams (iperf3 < 3.16): 17-23% of the link on healthy twins, published
    results = run(physical(sections()), bandwidth=figures(head__enp1s0f0np0=34.0, head__enP2p1s0f0np0=46.0,
                                                          head__enp1s0f1np1=36.0, worker__enp1s0f1np1=35.0))  # fmt: skip
    assert failing(results) == set()
    assert {r.status for r in results if r.name == "fabric.bandwidth"} == {"ok"}


def test_the_lab_cannot_judge_a_veth_by_its_nominal_speed():
    # 1 Gb/s on both head-worker twins of the lab: no twin differs, and a veth has no line rate
    results = run(bandwidth=figures(head__enp1s0f0np0=1.0, head__enP2p1s0f0np0=1.0,
                                    head__enp1s0f1np1=1.0, worker__enp1s0f1np1=1.0))  # fmt: skip
    assert failing(results) == set()


def test_iperf3_missing_warns_and_a_refused_probe_fails():
    missing = bandwidth.parse_iperf(127, "iperf3: not found")
    results = run(bandwidth={**probes("healthy"), f"{H}/{RAIL}": missing})
    assert failing(results) == set()
    assert bw(results, W, RAIL).status == "warn" and "apt install iperf3" in bw(results, W, RAIL).fix
    refused = bandwidth.parse_iperf(
        1, json.dumps({"error": "unable to connect to server - server may not be up: Connection refused"})
    )
    results = run(bandwidth={**probes("healthy"), f"{H}/{RAIL}": refused})
    assert failing(results) == {("fabric.bandwidth", H, RAIL), ("fabric.bandwidth", W, RAIL)}
    assert "Connection refused" in bw(results, H, RAIL).message


def test_a_rail_that_does_not_ping_is_not_probed():
    secs = sections("wrong-mtu")
    ready = bandwidth.pinging(INV, _facts(secs), bandwidth.rails(INV, list(INV.hosts)))
    assert f"{H}/{RAIL}" not in {r.key for r in ready} and len(ready) == 3
    results = run(secs, bandwidth={k: v for k, v in probes("healthy").items() if k != f"{H}/{RAIL}"})
    assert bw(results, W, RAIL).status == "skipped" and "fabric.ping" in bw(results, W, RAIL).message
    assert ("fabric.bandwidth", W, RAIL) not in failing(results)


def test_siblings_are_the_twins_and_the_offload_links():
    groups = bandwidth.siblings(bandwidth.rails(INV, list(INV.hosts)))
    assert [[r.key for r in g] for g in groups] == [
        [f"{H}/{RAIL}", f"{H}/{TWIN}"], [f"{H}/enp1s0f1np1", f"{W}/enp1s0f1np1"],
    ]  # fmt: skip


def test_a_link_that_negotiated_low_is_fabric_speed():
    # a 40G cable in a 200G port: the port really links at 40000 (unlike a degraded CX-7)
    out = "enp1s0f0np0 40000 virtual\nenP2p1s0f0np0 200000 virtual\nenp1s0f1np1 40000 virtual\n"
    results = run(edit(sections(), W, "speeds", out))
    assert failing(results) == {("fabric.speed", W, RAIL)}
    assert "40 Gb/s, expected 200 Gb/s: degraded" in by(results, "fabric.speed", W, RAIL).message
    results = run(edit(sections(), W, "speeds", out.replace(" 40000 virtual\nenP2", " 100000 virtual\nenP2")))
    assert by(results, "fabric.speed", W, RAIL).status == "warn"


def _facts(secs):
    from sparkctl.facts.host import parse_host
    from sparkctl.facts.probe import Section

    return {h: parse_host(INV, h, {k: Section(v["rc"], v["out"]) for k, v in raw.items()}) for h, raw in secs.items()}
