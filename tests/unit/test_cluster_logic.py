"""The cluster's pure logic: addresses, cells, a cell's own campaign."""
import dataclasses
from pathlib import Path

import pytest

from plt_bench import campaign, cluster
from plt_bench.errors import UsageError


@pytest.mark.parametrize("text", ["tcp://10.0.0.1:8786", "tcp://head.lab:8786", "tcp://[fd00::1]:8786"])
def test_scheduler_addresses_are_taken(text):
    assert cluster.scheduler_address(text, "--cluster") == text


@pytest.mark.parametrize("text", ["", "10.0.0.1:8786", "tcp://10.0.0.1", "tcp://10.0.0.1:0", "tcp://10.0.0.1:70000",
                                  "udp://10.0.0.1:8786", "tcp://a b:1", "tcp://x:1;rm"])
def test_bad_scheduler_addresses_are_refused_naming_the_option_and_the_form(text):
    with pytest.raises(UsageError, match=r"--scheduler: .*expected tcp://HOST:PORT"):
        cluster.scheduler_address(text, "--scheduler")


def test_the_cells_of_a_campaign_and_a_cells_own_plan():
    spec = campaign.load(None, {"size": "5KB,500KB", "bw": "10mbit,100mbit", "runs": "3", "proto": "both"})
    cells = cluster.cells(spec)
    assert len(cells) == 4 and len(set(cells)) == 4
    plan = spec.plan()
    for cond, page in cells:
        one = cluster.cell_spec(spec, cond, page)
        # the cell's plan is the campaign's plan for that cell, in the same order: same runs, both protocols
        assert one.plan() == [s for s in plan if s[0] == cond and s[2] == page]
        assert len(one.plan()) == 3 * 2
    # every slot of the campaign is in exactly one cell
    assert sorted(map(repr, plan)) == sorted(repr(s) for c, p in cells for s in cluster.cell_spec(spec, c, p).plan())


def test_a_cell_never_pools_hosts_whose_key_metadata_differ():
    from plt_bench.analysis import stats
    from plt_bench.metadata import KEY_FIELDS

    from .trials import trial
    meta = {k: "same" for k in KEY_FIELDS}
    hosts = {"a/pb1": {**meta, "host": "a"}, "a/pb2": {**meta, "host": "a"}, "b/pb1": {**meta, "host": "b",
                                                                                       "kernel": "other"}}
    same = [trial(seq=i, host="a/pb1") for i in range(3)] + [trial(seq=3, host="a/pb2")]
    kept, warnings = stats.unpooled(same, hosts)
    assert kept == same and warnings == []  # two testbeds of one machine: alike, pooled
    mixed = [trial(seq=i, host="a/pb1") for i in range(3)] + [trial(seq=3 + i, host="b/pb1") for i in range(2)]
    kept, warnings = stats.unpooled(mixed, hosts)
    assert kept == mixed[:3]  # the host with the most ok trials keeps the cell
    assert len(warnings) == 1 and "2 trial(s) of b/pb1 left out" in warnings[0] and "host, kernel" in warnings[0]
    assert stats.hosts_table(mixed)[1][2] == "a/pb1 (3), b/pb1 (2)"
    pinned = [trial(seq=i, host="a/pb1", cpus="0-1") for i in range(2)] + [trial(seq=2, host="a/pb2", cpus="2-3")]
    assert stats.hosts_table(pinned)[1][2] == "a/pb1 [0-1] (2), a/pb2 [2-3] (1)"
    assert stats.hosts_table([trial()]) == []  # one machine: no hosts table


def test_a_worker_gets_two_cpus_no_other_worker_holds_or_none():
    assert cluster.CORES_PER_WORKER == 2
    assert cluster.choose_cpus((0, 1, 2, 3), {}) == (0, 1)
    assert cluster.choose_cpus((0, 1, 2, 3), {"pb1": {"cpus": [0, 1]}}) == (2, 3)
    assert cluster.choose_cpus((0, 1, 2, 3), {"pb1": {"cpus": [1]}, "pb2": {"cpus": [3]}}) == (0, 2)
    assert cluster.choose_cpus((0, 1, 2), {"pb1": {"cpus": [0, 1]}}) is None  # one left: too few
    assert cluster.choose_cpus((0, 1), {"pb1": {"cpus": [0, 1], "shared": True}}) is None


@pytest.mark.parametrize("wanted,shared,claims,problem", [
    ((2, 3), False, {"pb1": {"cpus": [0, 1]}}, None),
    ((0, 1, 2, 3), True, {"pb1": {"cpus": [0, 1, 2, 3], "shared": True}}, None),  # sharing beside sharing
    ((1, 2), False, {"pb1": {"cpus": [0, 1]}}, "--cpus: CPU(s) 1 are held by worker pb1, which is pinned to 0-1"),
    ((0, 1), False, {"pb1": {"cpus": [0, 1, 2, 3], "shared": True}},
     "--cpus: CPU(s) 0-1 are held by worker pb1, which shares every core"),
    ((3,), False, {}, "--cpus: 3 is 1 CPU; a worker needs 2"),
    ((3, 4, 5), False, {}, "--cpus: CPU(s) 4-5 are not this machine's to use (it may use 0-3)"),
    ((0, 1, 2, 3), True, {"pb1": {"cpus": [2, 3]}, "pb2": {"cpus": [0, 1], "shared": True}},
     "--share-cores: worker(s) pb1 on this machine are pinned to their own CPUs"),
])
def test_a_worker_is_refused_cpus_it_cannot_have_and_told_why(wanted, shared, claims, problem):
    got = cluster.claim_problem(wanted, shared, (0, 1, 2, 3), claims)
    assert (got is None) if problem is None else got.startswith(problem), got


def test_a_cluster_campaign_takes_captures_and_refuses_a_server_machine():
    cluster.unsupported(campaign.load(None, {"size": "5KB"}))
    cluster.unsupported(campaign.load(None, {"capture": "cpu,pcap"}))  # they come back to the head (outgoing)
    with pytest.raises(UsageError, match=r"^--server-machine: not with --cluster"):
        cluster.unsupported(campaign.load(None, {"server_machine": "10.0.0.2", "iface": "eth0"}))
    from plt_bench.pages import page_url
    folder = campaign.load(None, {"size": f"url:{page_url('docs.pkg.test', '/index.html')}",
                                  "folder": f"docs.pkg.test={Path(__file__).parent}"})
    with pytest.raises(UsageError, match=r"^--folder: docs.pkg.test=.*served folders are not sent.*--size har:NAME"):
        cluster.unsupported(folder)


def test_the_cluster_s_tls_files_are_made_by_pure_openssl_commands(tmp_path):
    """Issue 36: a CA and one node certificate signed by it, ECDSA P-256, keys never on a command line."""
    from plt_bench import cluster
    argv = cluster.tls_commands(tmp_path)
    assert [a[:2] for a in argv] == [["openssl", "req"], ["openssl", "req"], ["openssl", "x509"]]
    assert "-x509" in argv[0] and "CA:TRUE" in " ".join(argv[0]) and "prime256v1" in " ".join(argv[1])
    assert argv[2][argv[2].index("-CA") + 1] == str(tmp_path / "ca.pem")
    assert {a for cmd in argv for a in cmd if a.startswith(str(tmp_path))} >= {
        str(tmp_path / n) for n in ("ca.pem", "ca.key", "node.pem", "node.key")}


def test_tls_and_plain_schedulers_and_listen_addresses_are_checked_by_name(tmp_path):
    from plt_bench import cluster
    assert cluster.security(None, "tcp://127.0.0.1:8786", "--cluster") is None
    with pytest.raises(UsageError, match="--cluster: tls://127.0.0.1:8786 is a TLS scheduler; give --tls DIR"):
        cluster.security(None, "tls://127.0.0.1:8786", "--cluster")
    with pytest.raises(UsageError, match="--tls: the scheduler tcp://127.0.0.1:8786 speaks plain TCP"):
        cluster.security(str(tmp_path), "tcp://127.0.0.1:8786", "--cluster")
    with pytest.raises(UsageError, match="--tls: .*ca.pem.* missing"):
        cluster.security(str(tmp_path), "tls://127.0.0.1:8786", "--cluster")
    assert cluster.listen_host("tcp://127.0.0.1:8786") == "127.0.0.1"
    assert cluster.listen_host("tls://localhost:8786") in ("127.0.0.1", "::1")
    assert cluster.listen_host("tcp://127.0.0.1:8786", "127.0.0.1") == "127.0.0.1"
    for bad, why in (("eth0", "is not an address of this machine; expected"), ("192.0.2.77", "is not an address of")):
        with pytest.raises(UsageError, match=f"--listen: .*{why}"):
            cluster.listen_host("tcp://127.0.0.1:8786", bad)


def test_a_worker_never_listens_on_every_interface_and_an_ipv6_host_is_bracketed(monkeypatch):
    """Issue 44, item 8: --listen 0.0.0.0 (and ::) was taken; an IPv6 listen host reached Dask without
    its brackets (its ValueError was then taken for a refused worker name); a scheduler's name that
    does not resolve ended in a traceback."""
    import socket
    for every in ("0.0.0.0", "::", "[::]"):
        with pytest.raises(UsageError, match="--listen: .* is every interface"):
            cluster.listen_host("tcp://127.0.0.1:8786", every)
    assert cluster.listen_host("tcp://[::1]:8786", "::1") == "::1"
    assert cluster.dask_host("::1") == "[::1]" and cluster.dask_host("10.0.0.2") == "10.0.0.2"

    def nowhere(*a, **kw):  # no look-up leaves this machine: the resolver's answer is made here
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", nowhere)
    with pytest.raises(UsageError, match="--scheduler: tcp://head.lab:8786: its host head.lab does not resolve"):
        cluster.listen_host("tcp://head.lab:8786")


def _tls_server(folder, plain=False):
    """A TLS (or plain) server on this process's loopback, as a scheduler would be: the node
    certificate of folder, clients verified against its CA. Returns (its address, its thread)."""
    import socket
    import ssl
    import threading
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    ctx = None
    if not plain:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(folder / "ca.pem"))
        ctx.load_cert_chain(str(folder / "node.pem"), str(folder / "node.key"))
        ctx.verify_mode = ssl.CERT_REQUIRED

    def serve():
        conn, _ = lsock.accept()
        with conn:
            try:
                if ctx is not None:
                    ctx.wrap_socket(conn, server_side=True).close()
                else:
                    conn.recv(1024)  # a plain server: reads a frame that never parses, and hangs up
            except (ssl.SSLError, OSError):
                pass
        lsock.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"tls://127.0.0.1:{lsock.getsockname()[1]}", t


def test_a_wrong_ca_a_bad_key_a_readable_key_and_a_plain_scheduler_are_each_said_as_such(tmp_path):
    """Issue 44, item 8: each was reported as 'no Dask scheduler answers' (Dask's join only times out)."""
    import os
    a, b = tmp_path / "a", tmp_path / "b"
    cluster.make_tls(a)
    cluster.make_tls(b)
    address, t = _tls_server(a)
    cluster.check_answers(address, "--scheduler", str(a))  # the cluster's own folder: the handshake completes
    t.join(10)
    address, t = _tls_server(a)
    with pytest.raises(UsageError, match=r"--tls: the scheduler at .* presents a certificate that .*b/ca.pem did not "
                                         r"sign"):
        cluster.check_answers(address, "--scheduler", str(b))
    t.join(10)
    address, t = _tls_server(a, plain=True)
    with pytest.raises(UsageError, match="--scheduler: the scheduler at .* did not complete a TLS handshake .*is it a "
                                         "plain tcp:// scheduler"):
        cluster.check_answers(address, "--scheduler", str(a))
    t.join(10)
    os.chmod(b / "node.key", 0o644)
    with pytest.raises(UsageError, match=r"--tls: .*b/node.key can be read by other users \(mode 0644\)"):
        cluster.security(str(b), "tls://127.0.0.1:8786", "--scheduler")
    (b / "node.key").write_text("not a key")
    os.chmod(b / "node.key", 0o600)
    address, t = _tls_server(a)
    with pytest.raises(UsageError, match="--tls: .* are not a CA, a certificate and its key"):
        cluster.check_answers(address, "--scheduler", str(b))


def test_the_browser_is_key_metadata_and_a_campaign_before_it_was_chromiums():
    """Two campaigns (or hosts) in two browsers are never pooled; a campaign from before the browser
    was recorded ran Chromium, and pools with a Chromium one of today (nor does its resume refuse)."""
    from plt_bench.metadata import key_diff
    from plt_bench.session import key_metadata_diff
    old = {"host": "a", "chromium": "Chromium 156"}
    assert key_diff(old, {**old, "browser": "chromium"}) == []
    assert key_diff(old, {**old, "browser": "firefox"}) == ["browser"]
    assert key_metadata_diff(old, {**old, "browser": "firefox"}) == ["browser: 'chromium' then, 'firefox' now"]


def test_a_cell_never_pools_a_device_two_hosts_calibrated_differently():
    """Each host calibrates a named device for itself (device.calibrate): two testbeds of one machine,
    alike in every key field, whose budgets for the phone differ are not pooled; alike, they are."""
    from plt_bench.analysis import stats
    from plt_bench.metadata import KEY_FIELDS

    from .trials import trial
    meta = {k: "same" for k in KEY_FIELDS}
    phone = {"device": "low-end-phone", "target_index": 264, "host_index": 2000.0, "budget_cores": 0.14,
             "measured_index": 270.0}
    other = {**phone, "host_index": 1900.0, "budget_cores": 0.15}
    mixed = [trial(seq=i, host="a/pb1") for i in range(3)] + [trial(seq=3 + i, host="a/pb2") for i in range(2)]
    kept, warnings = stats.unpooled(mixed, {"a/pb1": {**meta, "devices": {"low-end-phone": phone}},
                                            "a/pb2": {**meta, "devices": {"low-end-phone": other}}})
    assert kept == mixed[:3] and len(warnings) == 1 and "low-end-phone's calibration" in warnings[0]
    kept, warnings = stats.unpooled(mixed, {"a/pb1": {**meta, "devices": {"low-end-phone": phone}},
                                            "a/pb2": {**meta, "devices": {"low-end-phone": dict(phone)}}})
    assert kept == mixed and warnings == []


def test_a_worker_keeps_its_own_hosts_calibrations_of_the_campaign_only():
    phone = {"device": "low-end-phone", "budget_cores": 0.14}
    given = {"a/pb1": {"low-end-phone": phone}, "b/pb1": {"mid-phone": {"budget_cores": 0.5}}}
    assert cluster.own_calibrations("a/pb1", given, None, "q1") == {"low-end-phone": phone}
    assert cluster.own_calibrations("c/pb1", given, None, "q1") == {}  # another host's are not its own
    laptop = {"laptop": {"budget_cores": 0.6}}
    assert cluster.own_calibrations("c/pb1", given, ("q1", laptop), "q1") == laptop  # measured in this run
    assert cluster.own_calibrations("c/pb1", given, ("q0", laptop), "q1") == {}  # another campaign's run
    assert cluster.own_calibrations("c/pb1", None, None, "q1") == {}


def test_a_cell_asks_for_what_its_campaign_needs_and_a_campaign_no_worker_can_run_is_refused_naming_the_lack():
    """Issue 49: a worker declares what it can run as Dask resources (capability_resources); each cell
    asks for its campaign's needs (each browser and server, a netem kernel, the CPU controller), so it
    lands only where it can run; no_worker_can says, per worker, what it lacks, or None."""
    caps = {"browsers": {"chromium": {"chromium": "Chromium 1"}, "firefox": {"firefox": "Firefox 1"}},
            "servers": ["caddy"], "netem": False, "cpu_budget": True, "cores": 2}
    have = {cluster.RESOURCE: 1, **cluster.capability_resources(caps)}
    assert set(have) == {"testbed", "can-browser-chromium", "can-browser-firefox", "can-server-caddy", "can-cpu-budget"}
    plain = cluster.needs(campaign.load(None, {"size": "5KB"}))
    assert plain == {"can-browser-chromium": 1, "can-server-caddy": 1}
    both = cluster.needs(campaign.load(None, {"size": "5KB", "browser": "chromium,firefox", "http_server": "caddy,quinn",
                                              "cpu": "0.5", "link": "netem"}))
    assert both == {"can-browser-chromium": 1, "can-browser-firefox": 1, "can-server-caddy": 1, "can-server-quinn": 1,
                    "can-cpu-budget": 1, "can-netem": 1}
    assert cluster.no_worker_can(plain, {"pb1": have}) is None
    assert cluster.no_worker_can(plain, {}) == "no worker has joined the scheduler"
    lean = {cluster.RESOURCE: 1, **cluster.capability_resources({"browsers": {"chromium": {}}, "servers": ["caddy"]})}
    assert cluster.no_worker_can(both, {"pb1": have, "pb2": lean}) == (
        "pb1 lacks a kernel with sch_netem (--link netem), server quinn; pb2 lacks browser firefox, "
        "the CPU controller (--cpu, --device), a kernel with sch_netem (--link netem), server quinn")
    # one worker that has it all is enough: the others' cells go where they can run
    assert cluster.no_worker_can(plain, {"pb1": have, "pb2": {cluster.RESOURCE: 1}}) is None


def _stored_with_captures(tmp_path, files: dict[str, bytes]):
    """A worker's cell store holding one trial with these capture files (kind: content) and a CPU series."""
    from plt_bench.capture import Artifact
    from plt_bench.store import Store

    from .trials import trial
    store = Store(tmp_path / "worker" / "cell.sqlite")
    cid = store.new_campaign("c", "now", {}, {})
    folder = tmp_path / "worker" / "captures" / str(cid) / "00007-h3-index_500KB"
    folder.mkdir(parents=True)
    arts = []
    for kind, content in files.items():
        (folder / f"{kind}.bin").write_bytes(content)
        arts.append(Artifact(kind, folder / f"{kind}.bin", len(content), "a note" if kind == "pcap" else None))
    t = trial(cid=cid, seq=7)
    tid = store.add_trial(t)
    store.add_artifacts(tid, arts)
    store.add_cpu_samples(tid, [{"role": "browser", "t_s": 0.1, "user_s": 0.05, "system_s": 0.01}])
    return store, dataclasses.replace(t, trial_id=tid)


def test_a_trial_travels_to_the_head_whole_with_its_files_hashed_and_its_cpu_series(tmp_path):
    store, t = _stored_with_captures(tmp_path, {"pcap": b"p" * 1000, "keylog": b"k" * 10, "har": b"{}"})
    msg = cluster.outgoing(store, t, "worker-host/pb3")
    assert msg["trial"].host == "worker-host/pb3" and msg["trial"].trial_id is None
    assert msg["folder"] == "h3-index_500KB" and len(msg["cpu_samples"]) == 1
    assert {f.kind: f.content for f in msg["captures"]} == {"pcap": b"p" * 1000, "keylog": b"k" * 10, "har": b"{}"}
    written, lost = cluster.write_back(msg["captures"], tmp_path / "head" / "00042-h3-index_500KB")
    assert lost == [] and sorted(a.kind for a in written) == ["har", "keylog", "pcap"]
    for a in written:
        assert a.path.read_bytes() == {"pcap": b"p" * 1000, "keylog": b"k" * 10, "har": b"{}"}[a.kind]
        assert a.bytes == a.path.stat().st_size and a.path.parent.name == "00042-h3-index_500KB"
    assert next(a.note for a in written if a.kind == "pcap") == "a note"
    # private, as a local run's: a key log decrypts the traffic
    assert {oct(p.stat().st_mode & 0o777) for p in [written[0].path.parent, *(a.path for a in written)]} <= \
        {"0o700", "0o600"}
    assert not list((tmp_path / "head").rglob(".*.part"))  # nothing half-written left


def test_a_capture_the_head_cannot_keep_is_named_never_kept_as_present(tmp_path):
    store, t = _stored_with_captures(tmp_path, {"pcap": b"p" * 1000, "keylog": b"k" * 10})
    # over the limit a trial sends: named, its content left out (the smaller file still goes)
    msg = cluster.outgoing(store, t, "h/pb3", limit_bytes=100)
    unsent = {f.kind: f for f in msg["captures"]}
    assert unsent["pcap"].content is None and "past the 0 MB a trial sends to the head" in unsent["pcap"].unsent
    assert unsent["keylog"].content == b"k" * 10
    # damaged on the way: its hash does not match; a folder that cannot be written (a file in its way)
    good = cluster.outgoing(store, t, "h/pb3")["captures"]
    damaged = [dataclasses.replace(f, content=f.content[:-1] + b"x") if f.kind == "keylog" else f for f in good]
    written, lost = cluster.write_back(damaged, tmp_path / "head" / "a")
    assert [a.kind for a in written] == ["pcap"]
    assert lost == ["keylog keylog.bin: its hash does not match what the worker read (damaged on the way); not kept"]
    (tmp_path / "head" / "b").write_text("a file where the trial's folder goes")
    written, lost = cluster.write_back(good, tmp_path / "head" / "b")
    assert written == [] and len(lost) == 2 and all("could not be written at the head" in w for w in lost)
    written, lost = cluster.write_back(msg["captures"], tmp_path / "head" / "c")
    assert [a.kind for a in written] == ["keylog"] and lost[0].startswith("pcap pcap.bin: 0.0 MB would take")
    # issue 59, item 6: a worker's file name is input: one plain name, or counted as lost (a '/' raised
    # an uncaught ValueError that ended the head's campaign in a traceback)
    for bad in ("../../etc/cron.d/x", "a/b", "/abs", ".hidden", "", "x\0y", "n" * 300):
        named = [dataclasses.replace(f, name=bad) if f.kind == "keylog" else f for f in good]
        written, lost = cluster.write_back(named, tmp_path / "head" / "d")
        assert [a.kind for a in written] == ["pcap"], bad
        assert len(lost) == 1 and "is not one plain file name" in lost[0] or "empty" in lost[0], lost
    assert sorted(p.name for p in (tmp_path / "head" / "d").iterdir()) == ["pcap.bin"]
    assert not (tmp_path / "etc").exists()


def test_a_cell_s_failures_are_counted_among_the_workers_able_to_run_it():
    """Issue 59, item 10: a cell refused three times by its one worker said 'failed on 3 workers'."""
    assert cluster.attempts_failed(3, 1) == "failed 3 times, on its one worker"
    assert cluster.attempts_failed(3, 4) == "failed 3 times, among 4 workers able to run it"


def test_a_worker_with_a_server_machine_measures_its_cells_there_and_declares_its_servers():
    from plt_bench.remote import ServerRef
    machine = cluster.WorkerServer(ServerRef("10.0.0.2", "P" * 43 + "=", "a" * 64, 4443), "eth1", "/etc/plt/token")
    one = machine.cell(campaign.load(None, {"size": "5KB"}))
    assert (one.server_machine, one.iface, one.server_token_file) == ("10.0.0.2", "eth1", "/etc/plt/token")
    assert machine.session_args() == {"server_pin": "P" * 43 + "=", "server_token": None, "control_port": "4443"}
    caps = {"browsers": {}, "servers": ["caddy"], "netem": False, "cpu_budget": True, "cores": 2}
    said = cluster.with_server_machine(caps, {"servers": {"caddy": {}, "quinn": {}}, "netem": True, "may_shape": True})
    assert said["servers"] == ["caddy", "quinn"] and said["netem"] and said["cpu_budget"]
    # a serve that may not shape has no netem to offer; one from before it listed its servers ran Caddy
    assert cluster.with_server_machine(caps, {"netem": True})  == {**caps, "servers": ["caddy"], "netem": False}
