"""RAPL meter on fake powercap trees built in tmp_path (no root, no Intel CPU needed)."""

from pathlib import Path

import pytest
from dsptrain.energy import MeterError, MeterUnavailable, RaplMeter


def zone(root: Path, zname: str, name: str, energy_uj: int, max_uj: int = 10**9) -> Path:
    d = root / zname
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def set_uj(d: Path, value: int) -> None:
    (d / "energy_uj").write_text(f"{value}\n")


def test_sums_packages_and_dram_but_not_core_or_psys(tmp_path):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    core = zone(tmp_path, "intel-rapl:0:0", "core", 500_000)
    dram = zone(tmp_path, "intel-rapl:0:1", "dram", 0)
    p1 = zone(tmp_path, "intel-rapl:1", "package-1", 7)
    psys = zone(tmp_path, "intel-rapl:2", "psys", 0)
    zone(tmp_path, "intel-rapl-mmio:0", "package-0", 0)  # mirror of p0: must be skipped
    meter = RaplMeter(tmp_path)
    meter.start()
    set_uj(p0, 3_000_000)  # +2 J
    set_uj(core, 1_500_000)  # +1 J, inside the package figure
    set_uj(dram, 250_000)  # +0.25 J
    set_uj(p1, 500_007)  # +0.5 J
    set_uj(psys, 9_000_000)  # +9 J, contains the packages
    r = meter.stop()
    assert r.joules == pytest.approx(2.75)
    assert (r.meter, r.estimated) == ("rapl", False)
    assert r.detail["domains"]["intel-rapl:0:0:core"] == pytest.approx(1.0)
    assert r.detail["domains"]["intel-rapl:2:psys"] == pytest.approx(9.0)
    assert len(r.detail["domains"]) == 5


def test_counter_wraparound(tmp_path):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 999_000, max_uj=1_000_000)
    meter = RaplMeter(tmp_path)
    meter.start()
    set_uj(p0, 500)
    r = meter.stop()
    assert r.joules == pytest.approx(1500e-6)
    assert r.detail["wrapped"] == ["package-0"]


def test_energy_uj_as_directory_is_unavailable_and_names_file(tmp_path):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    (p0 / "energy_uj").unlink()
    (p0 / "energy_uj").mkdir()  # reads fail whatever the user (tests run as root)
    with pytest.raises(MeterUnavailable, match=r"intel-rapl:0/energy_uj"):
        RaplMeter(tmp_path)


def test_permission_denied_is_unavailable_and_names_file(tmp_path, monkeypatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 0)
    real = Path.read_text

    def deny(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(MeterUnavailable, match=r"energy_uj.*PermissionError"):
        RaplMeter(tmp_path)


def test_missing_energy_file_mid_run_raises(tmp_path):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path)
    meter.start()
    (p0 / "energy_uj").unlink()
    with pytest.raises(MeterUnavailable, match="energy_uj"):
        meter.stop()


def test_no_tree_or_no_zones(tmp_path):
    with pytest.raises(MeterUnavailable, match="does not exist"):
        RaplMeter(tmp_path / "absent")
    with pytest.raises(MeterUnavailable, match="no intel-rapl"):
        RaplMeter(tmp_path)


def test_garbage_value_names_file_and_value(tmp_path):
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    (p0 / "energy_uj").write_text("lots\n")
    with pytest.raises(MeterError, match=r"energy_uj holds 'lots'"):
        RaplMeter(tmp_path)


def test_bracket_misuse_is_an_error(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = RaplMeter(tmp_path)
    with pytest.raises(MeterError, match="before start"):
        meter.stop()
    meter.start()
    with pytest.raises(MeterError, match="twice"):
        meter.start()
