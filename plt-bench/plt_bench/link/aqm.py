"""The bottleneck's queue discipline (issue 46): --aqm droptail,codel,fq_codel,pie, each with the
parameters a researcher sets, as one condition of the link (Conditions.aqm: the Aqm record parsed
once, where the campaign is built; its canonical text is what labels, stores and definitions hold).

    --aqm codel                       CoDel at RFC 8289's defaults (target 5 ms, interval 100 ms)
    --aqm codel:target=10ms:interval=200ms,fq_codel:flows=256,pie:target=20ms

Where it runs: where the router's kernel has sch_netem, the kernel's qdisc of the same name sits
beneath netem's delay and an htb at the rate (commands.netem_aqm_commands; read back by
readback.check_managed); elsewhere (this machine's kernel has neither) linkem holds the bottleneck
itself, at the direction's constant rate, under the discipline (linkem/src/aqm.rs: the RFCs' state
machines); a direction's rate is then linkem's, not htb's (resolve decides). Without --aqm the
bottleneck stays the kernel's htb with its pfifo, as for every campaign before (Conditions.aqm None:
'fifo' in tables). --ecn: the discipline marks ECN-capable packets CE where it would drop them.

Everything here is pure: the parser, the canonical text, linkem's keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

NAMES = ("droptail", "codel", "fq_codel", "pie")
# each discipline's parameters: (linkem's key, unit, default, lowest, highest); ms are milliseconds
PARAMS: dict[str, dict[str, tuple[str, str, float, float, float]]] = {
    "droptail": {},
    "codel": {"target": ("target_us", "ms", 5.0, 0.1, 1000.0), "interval": ("interval_us", "ms", 100.0, 1.0, 10_000.0)},
    "fq_codel": {"target": ("target_us", "ms", 5.0, 0.1, 1000.0), "interval": ("interval_us", "ms", 100.0, 1.0, 10_000.0),
                 "flows": ("flows", "", 1024, 1, 65536), "quantum": ("quantum", "", 1514, 64, 65536)},
    "pie": {"target": ("target_us", "ms", 15.0, 0.1, 1000.0), "tupdate": ("tupdate_us", "ms", 15.0, 1.0, 1000.0),
            "burst": ("burst_us", "ms", 150.0, 0.0, 10_000.0)},
}
# what each discipline's figure in the link check is judged against (ms): the target it keeps the
# standing queue's delay near (droptail: none; its buffer fills)
FORM = "NAME[:key=value...], NAME one of droptail, codel, fq_codel, pie (for example codel:target=10ms)"


@dataclass(frozen=True)
class Aqm:
    """A discipline and its parameters (every one, defaults filled in)."""
    name: str
    params: tuple[tuple[str, float], ...] = ()

    def get(self, key: str) -> float:
        return dict(self.params)[key]

    @property
    def text(self) -> str:
        """The canonical text (what Conditions.as_dict holds for the discipline): the name, then the parameters that differ from the
        defaults, in PARAMS' order."""
        extra = [f"{k}={_fmt(v)}{PARAMS[self.name][k][1]}" for k, v in self.params
                 if v != PARAMS[self.name][k][2]]
        return ":".join([self.name, *extra])

    @property
    def target_ms(self) -> float | None:
        """The standing delay it aims at (CoDel's and FQ-CoDel's target, PIE's QDELAY_REF); None: droptail."""
        return self.get("target") if "target" in PARAMS[self.name] else None

    def linkem_keys(self) -> list[str]:
        """linkem's --dir keys for it (aqm=, then each parameter in linkem's unit)."""
        out = [f"aqm={self.name}"]
        for k, v in self.params:
            key, unit, *_ = PARAMS[self.name][k]
            out.append(f"{key}={int(round(v * 1000)) if unit == 'ms' else int(v)}")
        return out


# what the kernel's qdiscs (the netem backend) hold fixed: PIE's burst allowance is RFC 8033's 150 ms there
KERNEL_FIXED = {("pie", "burst"): 150.0}


def kernel_refusal(a: Aqm) -> str | None:
    """Why the kernel's qdisc cannot run this discipline as asked (pure), or None."""
    for (name, key), fixed in KERNEL_FIXED.items():
        if a.name == name and a.get(key) != fixed:
            return f"the kernel's {name} has a fixed {key} of {fixed:g} ms"
    return None


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def parse(text: str, option: str = "--aqm") -> Aqm:
    """One item of --aqm (pure); UsageError naming the option and the accepted form."""
    from ..units import parse_duration_ms
    parts = [p.strip() for p in str(text).strip().lower().split(":")]
    name = parts[0]
    if name not in PARAMS:
        raise UsageError(f"{option}: '{text}' is no queue discipline; expected {FORM}")
    given: dict[str, float] = {}
    for kv in parts[1:]:
        key, eq, value = kv.partition("=")
        if not eq or key not in PARAMS[name]:
            known = ", ".join(PARAMS[name]) or "none"
            raise UsageError(f"{option}: '{kv}' in '{text}' is not a parameter of {name} (its parameters: {known}); "
                             f"expected {FORM}")
        if key in given:
            raise UsageError(f"{option}: {key} is given twice in '{text}'")
        _, unit, _, lo, hi = PARAMS[name][key]
        if unit == "ms":
            v = parse_duration_ms(value, f"{option} {name} {key}")
        else:
            if not value.isdigit():
                raise UsageError(f"{option}: {name} {key}={value!r}; expected a whole number from {lo:g} to {hi:g}")
            v = float(int(value))
        if not lo <= v <= hi:
            raise UsageError(f"{option}: {name} {key}={value} is out of range; expected {lo:g} to {hi:g}"
                             f"{' ms' if unit == 'ms' else ''}")
        given[key] = v
    a = Aqm(name, tuple((k, given.get(k, spec[2])) for k, spec in PARAMS[name].items()))
    params = dict(a.params)
    if "interval" in params and params["target"] > params["interval"]:
        # CoDel acts once the delay has stayed above target for an interval (RFC 8289: target 5-10% of it)
        raise UsageError(f"{option}: '{text}': target {_fmt(params['target'])} ms is above interval "
                         f"{_fmt(params['interval'])} ms; expected a target at most the interval (RFC 8289: 5-10% "
                         "of it; defaults target=5ms, interval=100ms)")
    return a


def parse_list(text: str | None, option: str = "--aqm") -> tuple[Aqm | None, ...]:
    """--aqm's list as the conditions' disciplines, each parsed once here (pure); (None,) when not given:
    the kernel's FIFO as before. Refused: an empty item, or one discipline given twice alike."""
    if text is None:
        return (None,)
    from ..units import split_list
    out: list[Aqm] = []
    for item in split_list(str(text), option):
        a = parse(item, option)
        if a in out:
            raise UsageError(f"{option}: {a.text} is given twice")
        out.append(a)
    if not out:
        raise UsageError(f"{option}: empty; expected queue disciplines, comma-separated, each {FORM}")
    return tuple(out)
