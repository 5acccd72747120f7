"""dsp_kernels/ops.h and its ctypes mirror agree: every field's offset, every size.

The C side is checked by the Hexagon compiler itself (_Static_assert, -fsyntax-only),
the running server by its handshake."""

import ctypes
import re
import shutil
import subprocess

from dsptrain.backends import dsp_abi, dsp_build

STRUCTS = {
    "dspt_op_desc": dsp_abi.OpDesc,
    "dspt_rng": dsp_abi.Rng,
    "dspt_cost": dsp_abi.Cost,
    "dspt_cmd": dsp_abi.Cmd,
    "dspt_reply": dsp_abi.Reply,
    "dspt_hello": dsp_abi.Hello,
}


def _need(need_tools, tool):
    need_tools([] if shutil.which(tool) else [tool], dsp_build.INSTALL_HINT)


def test_layout_compiles_on_hexagon(tmp_path, need_tools):
    _need(need_tools, "clang-16")
    lines = ["#include <stddef.h>", '#include "ops.h"']
    for cname, mirror in STRUCTS.items():
        lines.append(f'_Static_assert(sizeof(struct {cname}) == {ctypes.sizeof(mirror)}, "{cname}");')
        for field, _ in mirror._fields_:
            cfield = "in" if field == "in_" else field
            off = getattr(mirror, field).offset
            lines.append(f'_Static_assert(offsetof(struct {cname}, {cfield}) == {off}, "{cname}.{cfield}");')
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(
        [
            "clang-16",
            "--target=hexagon",
            "-mv66",
            "-fsyntax-only",
            "-ffreestanding",
            "-I",
            str(dsp_build.kernels_dir()),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_constants_match_header():
    header = (dsp_build.kernels_dir() / "ops.h").read_text()
    defs = dict(re.findall(r"\b(DSPT_[A-Z0-9_]+)\s*=\s*(-?\d+)", header))
    defs.update(re.findall(r"#define (DSPT_[A-Z_]+) \(?(-?\d+)u?\)?\n", header))
    assert int(defs["DSPT_OP_COUNT"]) == dsp_abi.OP_COUNT
    assert int(defs["DSPT_OP_NITI_UPDATE_S8"]) == dsp_abi.OP_NITI_UPDATE_S8
    assert int(defs["DSPT_NO_SUPPORT"]) == dsp_abi.NO_SUPPORT
    assert int(defs["DSPT_STO"]) == dsp_abi.ROUND_MODES["sto"]
    assert int(defs["DSPT_RING_SLOTS"]) == dsp_abi.RING_SLOTS
    assert int(defs["DSPT_RING_OFFSET"]) == dsp_abi.RING_OFFSET
    assert int(defs["DSPT_SHIFT_ESTIMATE"]) == dsp_abi.SHIFT_ESTIMATE
    paths = {int(v): k.removeprefix("DSPT_PATH_").lower() for k, v in defs.items() if k.startswith("DSPT_PATH_")}
    assert paths == dsp_abi.PATH_NAMES  # enum dspt_path: the names DspBackend.last_paths reports
    assert dsp_abi.RING_SLOTS * ctypes.sizeof(dsp_abi.OpDesc) <= dsp_abi.TENSOR_OFFSET - dsp_abi.RING_OFFSET


def test_handshake_reports_same_layout(need_tools):
    _need(need_tools, "qemu-hexagon")
    from dsptrain.backends.ops_dsp import DspBackend

    dsp = DspBackend(transport="emulated")
    try:
        dsp.transport.start()  # check_hello raised otherwise
        ops = dsp_abi.ops_in_mask(dsp.transport.op_mask)
        assert {"gemm_s8", "conv2d_s8", "requant", "niti_update_s8", "maxpool_bwd_s8"} <= ops
    finally:
        dsp.close()


def test_available_names_the_transport():
    from dsptrain.backends.ops_dsp import DspBackend

    ok, why = DspBackend.available()
    assert isinstance(ok, bool) and why
