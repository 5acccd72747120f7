"""Reading what a user hands dsptrain, with limits: files of the right kind and size,
YAML without surprises, numbers in their supported range, environment variables.

Every reader here refuses bad input with one UserError naming the file (or variable),
the key and the value, after bounded work: no read of a FIFO or device, no file larger
than its kind may be, no YAML that expands, nests or repeats keys past the limits.
"""

from .env import check_all as check_environment
from .files import check_regular, read_limited, read_slice, reap_stale_temps, temp_prefix
from .numbers import bounded, field_problem, number_problem
from .yaml_limits import YamlLimits, YamlProblem, load_yaml

__all__ = [
    "check_environment",
    "check_regular",
    "read_limited",
    "read_slice",
    "reap_stale_temps",
    "temp_prefix",
    "bounded",
    "field_problem",
    "number_problem",
    "YamlLimits",
    "YamlProblem",
    "load_yaml",
]
