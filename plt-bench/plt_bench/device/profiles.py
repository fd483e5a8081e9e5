"""Named visitor devices (issue 45): `--device NAME`, a profile per kind of device, pure.

A profile's CPU class is a Lighthouse BenchmarkIndex (device.calibrate.BENCHMARK_JS: the same
definition, Chrome m86 onwards), the one CPU figure that is published for phones and desktops
alike; each host turns it into its own CPU budget at the start of a campaign (device.calibrate).
The screen is what the browser emulates (Chromium's mobile emulation, Firefox's prefs): its
viewport in CSS pixels, pixel ratio, touch and user agent, so a page lays out, and LCP is judged,
in the phone's window. The memory cap is the cgroup's (the whole browser's), at the device's RAM.

Where the figures come from (each profile's `source` says it again):
- CPU classes: Chrome DevTools' CPU calibration (front_end/panels/mobile_throttling/
  CalibrationController.ts, 2024) scores "a mid-tier device (like a Pixel 5)" 1000 and "a low-tier
  device (like a Moto G Power 2022)" 264 on this benchmark; Lighthouse's docs/throttling.md places a
  low-end desktop (an Intel NUC i3) at 1000-1500.
- Screens: Lighthouse's mobile emulation (core/config/constants.js: 412x823 CSS px, DPR 1.75, the
  Moto G Power's user agent) and desktop emulation (1350x940, DPR 1); Playwright's device descriptors
  for the Pixel 5 (393x851, DPR 2.75).
- Cores and RAM: the makers' specifications (Moto G Power 2022: MediaTek Helio G37, 8 cores, 4 GB;
  Pixel 5: Snapdragon 765G, 8 cores, 8 GB); the laptop's 2 cores and 8 GB are a NUC i3's.
"""

from __future__ import annotations

from dataclasses import dataclass

# the user agents name a Chrome version as Lighthouse's do (a fixed one, not the running browser's)
CHROME_UA_VERSION = "130.0.0.0"


@dataclass(frozen=True)
class Screen:
    """What the browser emulates: the viewport in CSS pixels, its pixel ratio, a mobile layout and
    touch, and the user agent (None: the browser's own)."""
    width_px: int
    height_px: int
    pixel_ratio: float = 1.0
    mobile: bool = False
    touch: bool = False
    user_agent: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    example: str            # the device it stands for
    benchmark_index: float  # its CPU class: Lighthouse's BenchmarkIndex on it (higher: faster)
    cores: int              # its CPU cores (the browser gets at most the host's: device.calibrate)
    memory_mb: int          # its RAM: the browser group's memory cap
    screen: Screen
    source: str             # where the figures come from

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * 2**20


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("low-end-phone", "Moto G Power (2022)", 264, 8, 4096,
            Screen(412, 823, 1.75, mobile=True, touch=True,
                   user_agent="Mozilla/5.0 (Linux; Android 11; moto g power (2022)) AppleWebKit/537.36 "
                              f"(KHTML, like Gecko) Chrome/{CHROME_UA_VERSION} Mobile Safari/537.36"),
            "CPU: Chrome DevTools' calibration, low-tier score 264; screen and user agent: Lighthouse's "
            "mobile emulation; cores and RAM: the maker's (Helio G37, 8 cores, 4 GB)"),
    Profile("mid-phone", "Pixel 5", 1000, 8, 8192,
            Screen(393, 851, 2.75, mobile=True, touch=True,
                   user_agent="Mozilla/5.0 (Linux; Android 11; Pixel 5) AppleWebKit/537.36 "
                              f"(KHTML, like Gecko) Chrome/{CHROME_UA_VERSION} Mobile Safari/537.36"),
            "CPU: Chrome DevTools' calibration, mid-tier score 1000; screen: Playwright's Pixel 5 "
            "descriptor; cores and RAM: the maker's (Snapdragon 765G, 8 cores, 8 GB)"),
    Profile("laptop", "Intel NUC i3 class", 1250, 2, 8192, Screen(1350, 940, 1.0),
            "CPU: the middle of Lighthouse's low-end desktop bracket (1000-1500, an Intel NUC i3); "
            "screen: Lighthouse's desktop emulation; cores and RAM: a NUC i3's (2 cores, 8 GB)"),
)}


def get(name: str) -> Profile:
    """The profile of that name; ValueError naming the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"'{name}' is no device; known: {', '.join(PROFILES)}") from None
