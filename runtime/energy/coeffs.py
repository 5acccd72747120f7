"""Energy per counted operation, per device: the table behind the estimate meter.

Honest summary: the only published, measured numbers here are Horowitz's 45 nm figures.
Everything per-device is DERIVED from them by two stated assumptions (instruction
overhead amortised over SIMD width, and a process-node factor). Mandheling (MobiCom
2022) measured whole-phone energy with a power monitor and reports ratios (8.9x less
energy per batch than TFLite/MNN on average), not per-operation energies, so none of
its numbers appear here. Treat an estimate as an order of magnitude for comparing
placements, never as a measurement; that is why its readings say estimated=True.

Sources:
[H14] M. Horowitz, "Computing's energy problem (and what we can do about it)",
      ISSCC 2014, pp. 10-14. 45 nm, 0.9 V: 8-bit add 0.03 pJ, 32-bit add 0.1 pJ,
      8-bit mult 0.2 pJ, 32-bit mult 3.1 pJ, 32-bit float add 0.9 pJ, 32-bit float mult
      3.7 pJ; 64-bit DRAM access 1.3-2.6 nJ; a whole instruction on a processor ~70 pJ,
      of which the 32-bit add itself is 0.1 pJ (the rest is fetch, decode, register file).
[HVX] Qualcomm Hexagon V66 HVX Programmer's Reference: `vrmpy` on 128-byte vectors does
      32 lanes x 4 int8 products = 128 multiply-accumulates per instruction.
[NEON] Arm Armv8.2-A dot product (SDOT, present in Kryo 585's Cortex-A77/A55 cores):
      16 int8 MACs per 128-bit instruction; FMLA .4s: 4 fp32 FMAs = 8 FLOPs.
[AVX2] x86 AVX2: VPMADDUBSW + VPMADDWD make 32 int8 MACs in 2 instructions (16 per
      instruction); VFMADD on 256 bits: 8 FMAs = 16 FLOPs per instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# -- [H14] 45 nm figures, picojoules --------------------------------------------------
INT8_MULT_PJ = 0.2
INT32_ADD_PJ = 0.1
FP32_ADD_PJ = 0.9
FP32_MULT_PJ = 3.7
INSTRUCTION_PJ = 70.0  # overhead of issuing one instruction on a processor
DRAM_BYTE_PJ = 1.95e3 / 8  # midpoint of 1.3-2.6 nJ per 64-bit access, per byte

INT8_MAC_PJ = INT8_MULT_PJ + INT32_ADD_PJ  # int8 x int8 into an int32 accumulator
FP32_FLOP_PJ = (FP32_ADD_PJ + FP32_MULT_PJ) / 2  # an FMA is two FLOPs

# -- assumptions (not measured; change them here, with a reason) ----------------------
# Logic energy per op from 45 nm to 7 nm (TSMC N7, Snapdragon 865) and to a 14 nm-class
# x86: assumed factors 1/4 and 1/2. Stillmaker & Baas, "Scaling equations for the
# accurate prediction of CMOS device performance from 180 nm to 7 nm" (Integration,
# VLSI Journal, 2017) give per-node equations to refine them.
NODE_7NM = 0.25
NODE_14NM = 0.5
# DRAM energy per byte relative to [H14]'s DDR3-era figure: LPDDR5 on the phone assumed
# 1/4, DDR4 on a host 1/2. Assumptions, of the order the node factors suggest.
LPDDR5 = 0.25
DDR4 = 0.5


def per_mac(macs_per_instruction: int, node: float) -> float:
    """Arithmetic plus the instruction overhead shared by the lanes of one SIMD op."""
    return (INT8_MAC_PJ + INSTRUCTION_PJ / macs_per_instruction) * node


def per_flop(flops_per_instruction: int, node: float) -> float:
    return (FP32_FLOP_PJ + INSTRUCTION_PJ / flops_per_instruction) * node


@dataclass(frozen=True)
class DeviceCoefficients:
    """Picojoules per int8 MAC (by backend), per fp32 FLOP, per DRAM byte."""

    name: str
    pj_per_int8_mac: dict = field(default_factory=dict)
    pj_per_fp32_flop: float = 0.0
    pj_per_byte: float = 0.0
    note: str = ""


# Snapdragon 865: Kryo 585 CPU (Cortex-A77 + A55, Armv8.2 dot product) and Hexagon 698
# (HVX, 128-byte vectors). Derived, see the module docstring.
SD865 = DeviceCoefficients(
    name="sd865",
    pj_per_int8_mac={
        "dsp": per_mac(128, NODE_7NM),  # [HVX] vrmpy: ~0.21 pJ
        "cpu": per_mac(16, NODE_7NM),  # [NEON] sdot: ~1.17 pJ
        "ref": per_mac(16, NODE_7NM),  # NumPy judge on the same CPU: charged as cpu
    },
    pj_per_fp32_flop=per_flop(8, NODE_7NM),  # [NEON] fmla .4s: ~2.76 pJ
    pj_per_byte=DRAM_BYTE_PJ * LPDDR5,  # ~61 pJ
    note="derived from Horowitz ISSCC 2014 (45 nm) by assumed 7 nm and LPDDR5 factors",
)

# A generic x86-64 host with AVX2 and DDR4 (no DSP: emulated DSP work has no host
# energy model, so "dsp" is absent and the estimate refuses it by name).
X86 = DeviceCoefficients(
    name="x86",
    pj_per_int8_mac={
        "cpu": per_mac(16, NODE_14NM),  # [AVX2] ~2.34 pJ
        "ref": per_mac(16, NODE_14NM),
    },
    pj_per_fp32_flop=per_flop(16, NODE_14NM),  # [AVX2] ~3.34 pJ
    pj_per_byte=DRAM_BYTE_PJ * DDR4,  # ~122 pJ
    note="derived from Horowitz ISSCC 2014 (45 nm) by assumed 14 nm and DDR4 factors",
)

DEVICES = {d.name: d for d in (SD865, X86)}
