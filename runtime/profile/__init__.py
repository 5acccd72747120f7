"""Where a training step's time, memory and energy go (`dsptrain profile`), and the logs viewers read.

- recorder.py: `Recorder`, what the executor reports each op call to while it is set
  (`Executor.profiler`), with the DSP's packet counts;
- table.py: the events added up per op and per layer (`build` -> `Profile`);
- report.py: the table as text, CSV and JSON;
- trace.py: the timeline in the Chrome trace event format (`write_trace`);
- timeline.py: that timeline drawn with matplotlib (`dsptrain plot --trace`);
- logs.py: per-step and per-epoch scalars to CSV, and to TensorBoard event files when a writer is installed.
"""

from .recorder import OpEvent, Recorder, record_steps
from .report import format_table, write_csv, write_json
from .table import Profile, Row, build, role
from .trace import trace_events, write_trace

__all__ = [
    "OpEvent",
    "Recorder",
    "record_steps",
    "Profile",
    "Row",
    "build",
    "role",
    "format_table",
    "write_csv",
    "write_json",
    "trace_events",
    "write_trace",
]
