"""The Python mirror of dsp_kernels/ops.h: op codes, statuses and the descriptor layout.

Keep in step with ops.h; the emulated server reports sizeof/offsetof at its
handshake (`check_hello`) and tests/backend/test_dsp_abi.py compares the two.
"""

from __future__ import annotations

import ctypes

ABI_VERSION = 4
MAGIC = 0x44535054

# enum dspt_op
OP_NOP, OP_GEMM_S8, OP_CONV2D_S8, OP_CONV2D_BWD_DATA_S8, OP_CONV2D_BWD_WEIGHT_S8 = 0, 1, 2, 3, 4
OP_REQUANT, OP_ABSMAX, OP_RELU_S8, OP_RELU_BWD_S8, OP_MAXPOOL_S8 = 5, 6, 7, 8, 9
OP_MAXPOOL_BWD_S8, OP_NITI_UPDATE_S8, OP_DEBUG_SLEEP, OP_DEBUG_CRASH = 10, 11, 12, 13
# depthwise: weights (and the weight gradient) tap-major, w[KH, KW, C]
OP_DWCONV2D_S8, OP_DWCONV2D_BWD_DATA_S8, OP_DWCONV2D_BWD_WEIGHT_S8, OP_COUNT = 14, 15, 16, 17
DW_OPS = (OP_DWCONV2D_S8, OP_DWCONV2D_BWD_DATA_S8, OP_DWCONV2D_BWD_WEIGHT_S8)
PATH_OPS = DW_OPS + (OP_CONV2D_S8, OP_CONV2D_BWD_DATA_S8, OP_CONV2D_BWD_WEIGHT_S8)  # report their path

OP_NAMES = {
    OP_NOP: "nop",
    OP_GEMM_S8: "gemm_s8",
    OP_CONV2D_S8: "conv2d_s8",
    OP_CONV2D_BWD_DATA_S8: "conv2d_bwd_data_s8",
    OP_CONV2D_BWD_WEIGHT_S8: "conv2d_bwd_weight_s8",
    OP_REQUANT: "requant",
    OP_ABSMAX: "absmax",
    OP_RELU_S8: "relu_s8",
    OP_RELU_BWD_S8: "relu_bwd_s8",
    OP_MAXPOOL_S8: "maxpool_s8",
    OP_MAXPOOL_BWD_S8: "maxpool_bwd_s8",
    OP_NITI_UPDATE_S8: "niti_update_s8",
    OP_DEBUG_SLEEP: "debug_sleep",
    OP_DEBUG_CRASH: "debug_crash",
    OP_DWCONV2D_S8: "dwconv2d_s8",
    OP_DWCONV2D_BWD_DATA_S8: "dwconv2d_bwd_data_s8",
    OP_DWCONV2D_BWD_WEIGHT_S8: "dwconv2d_bwd_weight_s8",
}

# enum dspt_dtype, dspt_status, dspt_round
I8, U8, I32, I64 = 1, 2, 3, 4
OK, NO_SUPPORT, BAD_PARAMS, INTERNAL = 0, 1, 2, 3
STATUS_NAMES = {OK: "OK", NO_SUPPORT: "NO_SUPPORT", BAD_PARAMS: "BAD_PARAMS", INTERNAL: "INTERNAL"}
ROUND_MODES = {"round": 0, "psto": 1, "sto": 2}
# enum dspt_path: which path a convolution product took (its result_shift)
PATH_NAMES = {
    0: "none",
    1: "dw_flat",
    2: "dw_blocks",
    3: "dw_classes",
    4: "dw_image_quads",
    5: "dw_column_quads",
    6: "pointwise",
    7: "conv_taps",
    8: "conv_lanes",
    9: "conv_grid",
    10: "conv_padded",
    11: "im2col_gemm",
    12: "flipped_gemm",
    13: "gather_gemm",
    14: "col2im",
    15: "planar",
    16: "wgrad_gemm",
    17: "dw_pixel_quads",
    18: "dw_err_quads",
    20: "pointwise_strided",
    21: "dw_image_pairs",
    22: "wgrad_outputs",
    23: "pointwise_pixels",
    24: "dw_column_triples",
    28: "dw_err_pairs",
    29: "dw_err_one",
    32: "dw_image_rows",
    40: "dw_quad_packets",
    41: "dw_triple_packets",
    44: "dw_err_packets",
    48: "dw_err_144",
}
SHIFT_ESTIMATE = -1
F_SATURATE_CHECK = 2  # REQUANT: a given shift that would saturate gives way to the estimate
F_ACCUMULATE = 1

MAX_THREADS = 8  # DSPT_MAX_THREADS: HVX contexts an op may be split across
RING_SLOTS = 64
RING_OFFSET = 4096
TENSOR_OFFSET = RING_OFFSET + 65536
ALIGN = 128
CMD_RUN, CMD_QUIT = 1, 2

_u32, _i32 = ctypes.c_uint32, ctypes.c_int32


class Rng(ctypes.Structure):
    _fields_ = [("seed", _u32), ("step", _u32), ("tensor_id", _u32), ("offset", _u32)]


class Cost(ctypes.Structure):
    _fields_ = [
        ("packets", _u32),
        ("insns", _u32),
        ("hvx", _u32),
        ("critical", _u32),
        ("thread_packets", _u32 * MAX_THREADS),
    ]


class OpDesc(ctypes.Structure):
    _fields_ = [
        ("op", _u32),
        ("dtype", _u32),
        ("in_", _u32 * 2),
        ("out", _u32 * 2),
        ("shape_a", _i32 * 4),
        ("shape_b", _i32 * 4),
        ("shape_out", _i32 * 4),
        ("stride", _i32),
        ("pad", _i32),
        ("kernel_h", _i32),
        ("kernel_w", _i32),
        ("round_mode", _i32),
        ("shift", _i32),
        ("bits", _i32),
        ("flags", _u32),
        ("rng", Rng),
        ("status", _i32),
        ("result_shift", _i32),
        ("result_absmax", _u32),
        ("threads", _u32),
        ("cost", Cost),
    ]


class Cmd(ctypes.Structure):
    _fields_ = [("magic", _u32), ("cmd", _u32), ("first", _u32), ("count", _u32)]


class Reply(ctypes.Structure):
    _fields_ = [("magic", _u32), ("status", _u32), ("done", _u32), ("reserved", _u32)]


class Hello(ctypes.Structure):
    _fields_ = [
        ("magic", _u32),
        ("abi_version", _u32),
        ("sizeof_desc", _u32),
        ("offsetof_rng", _u32),
        ("offsetof_status", _u32),
        ("offsetof_cost", _u32),
        ("op_mask", _u32),
        ("arena_bytes", _u32),
    ]


def expected_layout() -> dict[str, int]:
    """The layout facts the DSP reports at its handshake, as this mirror sees them."""
    return {
        "sizeof_desc": ctypes.sizeof(OpDesc),
        "offsetof_rng": OpDesc.rng.offset,
        "offsetof_status": OpDesc.status.offset,
        "offsetof_cost": OpDesc.cost.offset,
    }


def check_hello(hello: Hello) -> None:
    """Raise ValueError naming the field when the DSP's ops.h and this mirror disagree."""
    if hello.magic != MAGIC or hello.abi_version != ABI_VERSION:
        raise ValueError(
            f"DSP speaks ABI {hello.abi_version:#x} (magic {hello.magic:#x}), "
            f"host speaks {ABI_VERSION} (magic {MAGIC:#x})"
        )
    for field, want in expected_layout().items():
        got = getattr(hello, field)
        if got != want:
            raise ValueError(f"ops.h and dsp_abi.py disagree on {field}: DSP {got}, host {want}")


_ITEM = {I8: 1, U8: 1, I32: 4, I64: 8}


def _count(shape) -> int:
    n = 1
    for v in shape:
        n *= max(int(v), 1)
    return n


def desc_bytes(d: OpDesc) -> int:
    """Bytes the op reads and writes in the arena (DDR on a phone), from its shapes:
    the cost model's memory term (runtime/cost.py)."""
    a, b, out = _count(d.shape_a), _count(d.shape_b), _count(d.shape_out)
    if d.op in (
        OP_GEMM_S8,
        OP_CONV2D_S8,
        OP_CONV2D_BWD_DATA_S8,
        OP_CONV2D_BWD_WEIGHT_S8,
        OP_DWCONV2D_S8,
        OP_DWCONV2D_BWD_DATA_S8,
        OP_DWCONV2D_BWD_WEIGHT_S8,
    ):
        return a + b + 4 * out  # int8 operands, int32 accumulators
    if d.op in (OP_REQUANT, OP_ABSMAX):
        return _ITEM.get(d.dtype, 4) * a + (a if d.op == OP_REQUANT else 0)
    if d.op == OP_NITI_UPDATE_S8:
        return a + 4 * a + a  # w, int32 gradient, w'
    if d.op in (OP_RELU_S8,):
        return 2 * a
    if d.op in (OP_RELU_BWD_S8,):
        return 3 * a
    if d.op == OP_MAXPOOL_S8:
        return a + 2 * out  # values and argmax bytes
    if d.op == OP_MAXPOOL_BWD_S8:
        return 2 * a + out
    return 0


def ops_in_mask(mask: int) -> frozenset[str]:
    return frozenset(name for code, name in OP_NAMES.items() if mask >> code & 1)
