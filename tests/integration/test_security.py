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
