import pytest

from plt_bench import units
from plt_bench.errors import UsageError


@pytest.mark.parametrize("text,bps", [
    ("500kbit", 500_000), ("100mbit", 100_000_000), ("1gbit", 10**9), ("1Gbit", 10**9), ("2.5mbit", 2_500_000),
    ("100Mbps", 100_000_000), ("1Gbps", 10**9), ("800Kbps", 800_000), ("8000bps", 8000), ("10 mbit", 10**7),
    ("100Mbit/s", 100_000_000), ("8kbit", 8000), ("100gbit", 100 * 10**9),
])
def test_parse_rate_accepts_tc_and_tcconfig_units(text, bps):
    assert units.parse_rate(text) == bps


@pytest.mark.parametrize("text,fragment", [
    ("100", "is not a rate"), ("fast", "is not a rate"), ("100mb", "unknown rate unit"), ("-5mbit", "is not a rate"),
    ("0mbit", "out of range"), ("1kbit", "out of range"), ("200gbit", "out of range"), ("", "is not a rate"),
    ("1.0005mbit", "whole number of kbit"),
])
def test_parse_rate_rejects_with_the_accepted_form(text, fragment):
    with pytest.raises(UsageError) as e:
        units.parse_rate(text, "--bw")
    assert str(e.value).startswith("--bw:")
    assert fragment in str(e.value)


@pytest.mark.parametrize("text", ["100mbps", "100kbps", "1gbps"])
def test_lowercase_bps_is_refused_as_ambiguous_between_tc_and_tcconfig(text):
    with pytest.raises(UsageError, match="ambiguous"):
        units.parse_rate(text)


@pytest.mark.parametrize("bps,label", [(10**8, "100mbit"), (10**9, "1gbit"), (500_000, "500kbit"), (2_500_000, "2500kbit")])
def test_format_rate_round_trips(bps, label):
    assert units.format_rate(bps) == label
    assert units.parse_rate(label) == bps


@pytest.mark.parametrize("text,n", [("5KB", 5000), ("500KB", 500_000), ("10MB", 10**7), ("700MB", 7 * 10**8),
                                    ("1MiB", 2**20), ("64KiB", 65536), ("1.5MB", 1_500_000), ("1000B", 1000),
                                    ("5kb", 5000)])
def test_parse_size_decimal_kb(text, n):
    assert units.parse_size(text) == n


@pytest.mark.parametrize("text", ["5", "5XB", "0KB", "1.5B", "KB", "-5KB"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match="--size"):
        units.parse_size(text)


@pytest.mark.parametrize("n,label", [(5000, "5KB"), (500_000, "500KB"), (10**7, "10MB"), (7 * 10**8, "700MB"),
                                     (2**20, "1MiB"), (1234, "1234B")])
def test_format_size(n, label):
    assert units.format_size(n) == label


def test_durations_and_percent():
    assert units.parse_duration_ms("25ms", "--rtt") == 25
    assert units.parse_duration_ms("1s", "--rtt") == 1000
    assert units.parse_duration_ms("500us", "--rtt") == 0.5
    assert units.parse_percent("0.1%", "--loss") == 0.1
    for bad in ("25", "25 m", "ms"):
        with pytest.raises(UsageError, match="--rtt"):
            units.parse_duration_ms(bad, "--rtt")
    for bad in ("5", "101%", "-1%"):
        with pytest.raises(UsageError, match="--loss"):
            units.parse_percent(bad, "--loss")


@pytest.mark.parametrize("x,text", [(1030000.4, "1,030,000"), (123.4, "123"), (12.345, "12.3"), (0.004987, "0.00499"),
                                    (0.00001234, "1.23e-05"), (0, "0"), (-2.5, "-2.5")])
def test_format_sig_rounds_nothing_to_zero(x, text):
    assert units.format_sig(x) == text
