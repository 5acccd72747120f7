"""`dsptrain fl simulate | deploy | partition RUN.yaml`: federated training on Flower.

The actions live with the federated code (runtime/fl/command.py); this module only
registers them, like every subcommand here.
"""

from __future__ import annotations


def add_parser(sub, common):
    from ..fl.command import add_actions

    parser = sub.add_parser(
        "fl", parents=[common], help="federated training on Flower (simulate, deploy on localhost, partition)"
    )
    add_actions(parser, common)
    return parser


def run(args) -> int:
    return args.fl_action(args)
