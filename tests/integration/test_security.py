"""What the testbed exposes: Caddy on the testbed's address only, the pages only, private keys."""
import stat

from plt_bench import cmd
from plt_bench.pages import HOST


def _get(bed, path):
    res = cmd.run(["curl", "-sk", "--max-time", "10", "--resolve", f"{HOST}:443:{bed.plan.server_ip}", "-o", "/dev/null",
                   "-w", "%{http_code}", f"https://{HOST}{path}"], ns=bed.plan.client_ns, check=False)
    return res.stdout.strip()


def test_caddy_serves_the_pages_and_nothing_else(bed):
    assert _get(bed, "/index_5KB.html") == "200"
    for other in ("/MANIFEST.json", "/README.md", "/", "/../server/Caddyfile.template", "/index_5KB.html.bak",
                  "/replay/x/replay.json", "/replay/x/0-a.png/../../../MANIFEST.json"):
        assert _get(bed, other) == "404", other


def test_caddy_listens_only_on_the_testbed_addresses(bed):
    listeners = []
    for flags in ("-Hltn", "-Hlun"):
        for line in cmd.run(["ss", flags], ns=bed.plan.server_ns).stdout.splitlines():
            listeners.append(line.split()[3])
    # the server's address and its other origins' (one each): no admin port, no wildcard
    assert listeners and set(listeners) == {f"{ip}:443" for _, ip in bed.plan.origins}, listeners


def test_key_and_certificate_are_private(bed):
    for p in (bed.server.cert.key, bed.server.cert.cert):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == 0o600, (p, oct(mode))
        assert p.resolve().is_relative_to(bed.plan.run_dir.resolve())


WEB_ADDR = "198.18.250.1"  # the test's stand-in for a web server: an address of this machine's own loopback device


def test_a_recording_from_the_web_loads_in_a_namespace_of_its_own_with_a_way_out_and_no_loopback(tmp_path):
    """Issue 44, item 1: record from the web ran its worker, chromedriver and Chromium's DevTools in
    the machine's own namespace, where any local user could drive them. Now they run in the
    recording's namespace (record.WebNamespace): a page on an address this machine reaches loads
    through its user-mode NAT and is recorded; the machine's loopback is out of reach from inside
    (through the gateway or as its own), the worker and every process below it are in that namespace,
    and nothing is left after. (The suite sends nothing beyond this machine: the 'web' here is an
    address of this machine's own, added for the test.)"""
    import http.server
    import json
    import os
    import shutil
    import threading

    from plt_bench import procs
    from plt_bench import recorder as record
    from ..conftest import system_state
    before = system_state()
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<!doctype html><title>t</title><link rel=stylesheet href=a.css>"
                                     "<h1>a page from the web</h1>")
    (site / "a.css").write_text("h1 { color: teal }")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(site), **kw)

        def log_message(self, *a):
            pass
    cmd.run(["ip", "addr", "add", f"{WEB_ADDR}/32", "dev", "lo"])
    servers = []
    try:
        for addr in (WEB_ADDR, "127.0.0.1"):
            srv = http.server.ThreadingHTTPServer((addr, 0), Quiet)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            servers.append(srv)
        web_port, loop_port = (srv.server_address[1] for srv in servers)
        spool = record.new_spool()
        try:
            with record.web_browser(spool) as worker:
                name = next(n for n in os.listdir("/run/netns") if n.startswith(record.WEB_NS_PREFIX)
                            and n.startswith(record.web_ns_name(os.getpid(), procs.start_time(os.getpid()))))

                def reach(url):
                    return cmd.run(["curl", "-s", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url],
                                   ns=name, check=False).stdout.strip()
                assert reach(f"http://{WEB_ADDR}:{web_port}/index.html") == "200"  # the way out
                assert reach(f"http://{record.SLIRP_GATEWAY}:{loop_port}/") == "000"  # the machine's loopback, by the gateway
                assert reach(f"http://127.0.0.1:{loop_port}/") == "000"  # the namespace's own loopback
                inode = f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
                assert procs.netns_of(worker.proc.pid) == inode
                har = spool / "trial.har"
                answer = worker.load(record.web_request(f"http://{WEB_ADDR}:{web_port}/index.html",
                                                        spool / "profiles" / "t", har), 120)
                assert answer.get("nav") and not answer.get("error"), answer.get("error")
                urls = [e["request"]["url"] for e in json.loads(har.read_text())["log"]["entries"]]
                page = f"http://{WEB_ADDR}:{web_port}/"
                assert urls[:2] == [page + "index.html", page + "a.css"] and set(urls) <= {
                    page + "index.html", page + "a.css", page + "favicon.ico"}, urls  # the icon: the browser's own
        finally:
            shutil.rmtree(spool, ignore_errors=True)
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
        cmd.run(["ip", "addr", "del", f"{WEB_ADDR}/32", "dev", "lo"], check=False)
    assert not [n for n in os.listdir("/run/netns") if n.startswith(record.WEB_NS_PREFIX + f"{os.getpid()}-")]
    assert system_state() == before


def test_what_a_killed_recording_from_the_web_left_is_removed_by_clean(tmp_path):
    """Issue 44, item 1: after a SIGKILL of record, its way out (slirp4netns) ends with its maker (its
    exit pipe closes), and `clean` removes the namespace and its resolver file, naming it."""
    from plt_bench import procs
    from plt_bench import recorder as record
    from ..conftest import run_cli, system_state
    before = system_state()
    # the test is the subreaper of what its maker leaves: slirp4netns, reparented here, is judged by
    # itself (exited or not), not by how soon the machine's init reaps it
    procs.become_subreaper()
    try:
        _killed_recording_left(procs, record, run_cli)
    finally:
        procs.become_subreaper(False)
        procs.reap_children()
    assert system_state() == before


def _killed_recording_left(procs, record, run_cli) -> None:
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    maker = subprocess.Popen([sys.executable, "-c", "from plt_bench import recorder as record; import time\n"
                              "ns = record.WebNamespace().__enter__(); print(ns.name, flush=True); time.sleep(120)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        name = maker.stdout.readline().strip()
        assert record.WEB_NS_RE.fullmatch(name), name
        assert Path(f"/run/netns/{name}").exists() and Path(f"/etc/netns/{name}/resolv.conf").exists()
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
        maker.stdout.close()

    def slirp_runs() -> bool:
        procs.reap_children()
        return any(f"/run/netns/{name} " in line + " " for _, _, line in procs.table().values())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and slirp_runs():
        time.sleep(0.1)
    assert not slirp_runs(), "slirp4netns outlived its maker"
    r = run_cli("clean", "--testbed", "247")  # a testbed no test makes: what a killed recording left goes too
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"namespace {name}" in r.stdout, r.stdout
    assert not Path(f"/run/netns/{name}").exists() and not Path(f"/etc/netns/{name}").exists()
