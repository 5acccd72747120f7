"""`dsptrain export RUN_DIR_OR_CHECKPOINT --format F --out FILE`: a trained model for other
runtimes. Reads the checkpoint only (the model's layer list is stored in it).

Formats: onnx (float weights, dequantized), onnx-qdq (int8 weights with power-of-two
scales behind DequantizeLinear), onnx-niti (refuses any checkpoint but NITI's), npz (plain
arrays and a JSON header; layout in runtime/interchange/npz_export.py). For a NITI
checkpoint all three ONNX forms also carry NITI's int8 activation rounding in float
operators, so ONNX Runtime fed the same batches returns dsptrain's logits.
"""

from __future__ import annotations


def add_parser(sub, common):
    from ..interchange import FORMATS

    parser = sub.add_parser(
        "export",
        parents=[common],
        help="write a trained checkpoint as ONNX or npz",
        description=__doc__.split("\n\n", 1)[1].replace("\n", " "),
    )
    parser.add_argument("checkpoint", help="a checkpoint.npz, or the run directory holding one")
    parser.add_argument("--format", choices=FORMATS, default="onnx", help="default: onnx")
    parser.add_argument("--out", required=True, help="the file to write")
    return parser


def run(args) -> int:
    from ..interchange import export

    print(export(args.checkpoint, args.out, args.format))
    return 0
