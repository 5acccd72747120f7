"""The packets of dsp_kernels/dwconv_wgrad_rows.c (the depthwise weight gradient's 3 x 3 rows,
written in HVX packets): scripts/dw_wgrad_rows.py schedules them and runs every product
through whole rows symbolically. Here: each tap's sum holds each product exactly once, on
shapes beyond the ones the script checks, and the C file holds the loops as scheduled. The
DSP runs of the same loops are in tests/backend/test_dsp_dwconv.py (path dw_image_rows)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dw_wgrad_rows.py"


@pytest.fixture(scope="module")
def rows():
    spec = importlib.util.spec_from_file_location("dw_wgrad_rows", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("aligned", [True, False], ids=["vmem", "vmemu"])
@pytest.mark.parametrize("rows_blocks", [(1, 1), (3, 2), (5, 4), (16, 4)])
def test_every_product_once(rows, stride, aligned, rows_blocks):
    assert rows.run(stride, aligned, *rows_blocks)


def test_a_dropped_vadd_is_caught(rows):
    """The symbolic run can fail: the last vadd of the body removed, a sum misses products."""
    program = rows.program

    def broken(stride, aligned):
        prime, start, body, end, pend = program(stride, aligned)
        body = [list(p) for p in body]
        last = next(p for p in reversed(body) if any("vadd" in i for i in p))
        last.remove(next(i for i in reversed(last) if "vadd" in i))
        return prime, start, body, end, pend

    rows.program = broken
    try:
        assert not rows.run(1, True, 2, 1)
    finally:
        rows.program = program


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("aligned", [True, False], ids=["vmem", "vmemu"])
def test_c_file_holds_the_scheduled_packets(rows, stride, aligned):
    block = "\n".join(f'                "{line}\\n"' for line in rows.lines(stride, aligned))
    assert block in rows.C_FILE.read_text()
