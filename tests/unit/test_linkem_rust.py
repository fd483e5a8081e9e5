"""linkem's own unit tests (Rust, fake clock, seeded RNG): KS tests of the jitter laws, binomial
loss, order without reordering, the netlink message layout."""
import os
import shutil
import subprocess

from ..conftest import ROOT


def test_linkem_cargo_tests_pass():
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    assert os.path.exists(cargo), "cargo is needed to build linkem: run scripts/setup"
    r = subprocess.run([cargo, "test", "--release", "--locked", "--manifest-path", str(ROOT / "linkem" / "Cargo.toml")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "test result: ok." in r.stdout and " 0 failed" in r.stdout
