"""The FastRPC ctypes mirrors (runtime/backends/dsp_abi.py, dsp_fastrpc.py) against the C
headers they restate (dsp_kernels/ops.h, fastrpc_abi.h): each structure's size and each
field's offset, as a ctypes interpreter sees them and as a C compiler lays them out.

`python layouts.py` prints the ctypes side as JSON; `c_program()` is a C file printing
the C side in the same form."""

from __future__ import annotations

import ctypes
import json

# (module, ctypes class, C type); a C field is the ctypes field without its trailing "_"
# (Python's `in_` is C's `in`)
STRUCTS = [
    ("dsp_abi", "Rng", "struct dspt_rng"),
    ("dsp_abi", "Cost", "struct dspt_cost"),
    ("dsp_abi", "OpDesc", "struct dspt_op_desc"),
    ("dsp_abi", "Cmd", "struct dspt_cmd"),
    ("dsp_abi", "Reply", "struct dspt_reply"),
    ("dsp_abi", "Hello", "struct dspt_hello"),
    ("dsp_fastrpc", "_RemoteBuf", "remote_buf"),
    ("dsp_fastrpc", "_RemoteArg", "remote_arg"),
]


def ctypes_layouts() -> dict[str, dict[str, int]]:
    import importlib

    out = {}
    for module, name, c_type in STRUCTS:
        cls = getattr(importlib.import_module(f"dsptrain.backends.{module}"), name)
        layout = {"sizeof": ctypes.sizeof(cls), "alignof": ctypes.alignment(cls)}
        layout.update({field.rstrip("_"): getattr(cls, field).offset for field, *_ in cls._fields_})
        out[c_type] = layout
    return out


def c_program() -> str:
    """A C program printing the same JSON for the C types, for the field names ctypes_layouts()
    found (run where dsptrain imports, to know them)."""
    lines = [
        "#include <stdalign.h>",
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "fastrpc_abi.h"',
        '#include "ops.h"',
        "",
        "int main(void) {",
        '  printf("{");',
    ]
    for i, (c_type, layout) in enumerate(ctypes_layouts().items()):
        sep = ", " if i else ""
        lines.append(
            f'  printf("{sep}\\"{c_type}\\": {{\\"sizeof\\": %zu, \\"alignof\\": %zu", '
            f"sizeof({c_type}), alignof({c_type}));"
        )
        for field in layout:
            if field not in ("sizeof", "alignof"):
                lines.append(f'  printf(", \\"{field}\\": %zu", offsetof({c_type}, {field}));')
        lines.append('  printf("}");')
    lines += ['  printf("}\\n");', "  return 0;", "}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(ctypes_layouts()))
