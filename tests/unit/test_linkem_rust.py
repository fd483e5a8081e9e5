"""linkem's own unit tests (Rust, fake clock, seeded RNG): KS tests of the jitter laws, binomial
loss, order without reordering, the netlink message layout."""
from ..conftest import cargo_tests_pass


def test_linkem_cargo_tests_pass():
    cargo_tests_pass("linkem")
