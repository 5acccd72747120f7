"""Device profiles (configs/devices/): the fast memories batch splitting fits an op's
working set into and the speeds the cost model reads; loaded and checked here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..backends import ACCELERATOR, backend_class
from ..errors import ConfigError
from ..inputs import bounded
from .building import CONFIG_ROOT, build, read_yaml

# ---------------------------------------------------------------- device profiles


@dataclass(frozen=True)
class DspMemory:
    vtcm: int | str = "256KiB"  # tightly coupled vector memory
    l2: int | str = "1MiB"  # the DSP's L2 cache
    # speeds the scheduler's cost model reads (cost.py: micro-batch count, batch-split check);
    # the defaults are v66.yaml's (a phone's DSP), host.yaml has the emulator's
    macs_per_s: float = bounded(6.4e10, 1e3, 1e18)  # int8 multiply-accumulates per second in products
    bytes_per_s: float = bounded(1e10, 1e3, 1e15)  # bytes per second to and from DDR
    call_s: float = bounded(1e-4, 0.0, 10.0, low_open=True)  # seconds of overhead per call (a FastRPC round trip)
    # the modeled DSP time (cost.dsp_op_seconds): one packet per cycle per HVX thread
    clock_hz: float = bounded(1.0e9, 0.0, 1e12, low_open=True)  # the DSP core clock
    hvx_threads: int = bounded(4, 1, 8, why="HVX contexts of a Hexagon cDSP")  # the work of one op is split across them
    # hook -> why the DSP is bad at it: ops with such a hook run on the CPU under
    # scheduler.placement: profile (plan.place); keys must be hooks the DSP implements
    bad_at: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuMemory:
    l2: int | str = "host"  # bytes, a size, or "host": this machine's L2 (sysfs)
    macs_per_s: float = bounded(5e10, 1e3, 1e18)
    bytes_per_s: float = bounded(1e10, 1e3, 1e15)
    call_s: float = bounded(2e-5, 0.0, 10.0, low_open=True)  # Python dispatch of one op


@dataclass(frozen=True)
class HookSpeeds:
    """Each int8 product's measured MAC rate, by rate key (cost.RATE_KEYS: the product hook,
    `.pointwise` for 1x1 convolutions), written by `dsptrain calibrate`. A product without
    one runs at its processor's macs_per_s (cost.Speeds.rate)."""

    measured: dict[str, str] = field(default_factory=dict)  # part -> when, where, how (one line)
    cpu: dict[str, float] = field(default_factory=dict)  # MACs per second, timed on this machine's CPU kernels
    dsp: dict[str, float] = field(default_factory=dict)  # MACs per DSP cycle on the critical path (QEMU packets)


# a rate's bounds: MACs per second on the CPU; MACs per cycle across at most 8 HVX threads
# (each at most two 128-MAC vrmpy a packet: 2048 a cycle; the bound leaves room)
HOOK_RATE_RANGE = {"cpu": (0.0, 1e18, "MACs per second"), "dsp": (0.0, 1e4, "MACs per DSP cycle")}


@dataclass(frozen=True)
class DeviceProfile:
    """The fast memories batch splitting fits an op's working set into (configs/devices/)."""

    name: str
    description: str = ""
    dsp: DspMemory = field(default_factory=DspMemory)
    cpu: CpuMemory = field(default_factory=CpuMemory)
    hook_speeds: HookSpeeds = field(default_factory=HookSpeeds)
    source: str = ""

    def size(self, key: str) -> int:
        """Bytes of `dsp.vtcm`, `dsp.l2` or `cpu.l2` (checked when the profile loaded)."""
        part, name = key.split(".")
        return device_size(getattr(getattr(self, part), name), self.source, key)


HOST_L2_FALLBACK = 1 << 20  # when sysfs has no L2 size (not Linux): 1 MiB, said by `dsptrain info`


def host_l2_bytes() -> int:
    """This machine's L2 per core, from Linux sysfs; HOST_L2_FALLBACK when unreadable."""
    from ..memory import parse_size

    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() in (
                "Unified",
                "Data",
            ):
                return parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
    return HOST_L2_FALLBACK


def device_size(value, source, key) -> int:
    from ..memory import size_setting

    if value == "host":
        return host_l2_bytes()
    return size_setting(value, source, key, 4096, "is smaller than 4 KiB: not a cache size")


def load_device(name_or_path: str) -> DeviceProfile:
    """A device profile by name (configs/devices/<name>.yaml) or path; sizes are checked."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIG_ROOT / "devices" / f"{name_or_path}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (CONFIG_ROOT / "devices").glob("*.yaml"))
        raise ConfigError(path, None, f"no such device profile (known: {', '.join(known)})")
    profile = build(DeviceProfile, read_yaml(path), path, given={"source": str(path)})
    for key in ("dsp.vtcm", "dsp.l2", "cpu.l2"):
        profile.size(key)
    for part in ("dsp", "cpu"):
        for name in ("macs_per_s", "bytes_per_s", "call_s") + (("clock_hz",) if part == "dsp" else ()):
            value = getattr(getattr(profile, part), name)
            if not value > 0:
                raise ConfigError(path, f"{part}.{name}", f"{value!r} must be > 0")
    threads = profile.dsp.hvx_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 8:
        raise ConfigError(
            path, "dsp.hvx_threads", f"{threads!r} must be an integer from 1 to 8 (HVX contexts of a Hexagon cDSP)"
        )
    dsp_hooks = backend_class(ACCELERATOR).hooks  # the backend the profile's `dsp` part describes
    for hook, why in profile.dsp.bad_at.items():
        if hook not in dsp_hooks:
            raise ConfigError(
                path, f"dsp.bad_at.{hook}", f"{hook!r} is not a DSP hook (known: {', '.join(sorted(dsp_hooks))})"
            )
        if not isinstance(why, str) or not why.strip():
            raise ConfigError(path, f"dsp.bad_at.{hook}", f"{why!r}: give the reason as a string")
    check_hook_speeds(profile.hook_speeds, path)
    return profile


def check_hook_speeds(speeds: HookSpeeds, path) -> None:
    """Every measured rate names a rate key (cost.RATE_KEYS) and is a number in its range."""
    from ..cost import RATE_KEYS
    from ..inputs import number_problem

    for part, note in speeds.measured.items():
        if part not in HOOK_RATE_RANGE or not isinstance(note, str):
            raise ConfigError(path, f"hook_speeds.measured.{part}", f"{note!r}: give cpu or dsp -> one line of text")
    for part in ("cpu", "dsp"):
        low, high, unit = HOOK_RATE_RANGE[part]
        for key, value in getattr(speeds, part).items():
            where = f"hook_speeds.{part}.{key}"
            if key not in RATE_KEYS:
                raise ConfigError(path, where, f"{key!r} is not a product's rate key (known: {', '.join(RATE_KEYS)})")
            problem = number_problem(value, low, high, low_open=True, why=unit)
            if problem:
                raise ConfigError(path, where, problem)
