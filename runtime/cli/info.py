"""`dsptrain info`: the version, which backends were found and why the others were not."""

from __future__ import annotations

import platform

from .. import __version__


def add_parser(sub, common):
    return sub.add_parser("info", parents=[common], help="version, backends found and why others are not, CPU features")


def run(args) -> int:
    from ..backends import availability

    print(f"dsptrain {__version__} (Python {platform.python_version()}, {platform.machine()})")
    print("backends, in placement order:")
    for name, (ok, why) in availability().items():
        print(f"  {name:<4} {'yes' if ok else 'no ':<3}  {why}")
    try:
        from .._cpu_ops import cpu_features

        features = [k for k, v in cpu_features().items() if v]
        print(f"cpu features: {', '.join(features) or 'none beyond the baseline'}")
    except ImportError as exc:
        print(f"cpu features: unknown (native extension not loaded: {exc})")
    return 0
