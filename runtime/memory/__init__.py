"""The memory-budget layer: every tensor's size and lifetime, one arena, and the cheapest
plan that fits a budget.

- planner.py: lifetimes, buffers and arena offsets of one step (`plan_memory`);
- recompute.py: which activations to drop and rebuild (checkpoint schedules);
- fit.py: the cheapest (micro-batch, recompute) option whose peak fits a budget;
- budget.py: budgets (fixed, scheduled, the OS's available memory) and sizes;
- arena.py: the arena itself, where tensors live as views;
- pool.py: the array pool, kept memory for the large arrays an op makes beside the arena;
- report.py: the text `dsptrain plan` prints;
- rss.py: the process's resident set around one training step (per-batch RSS growth).
"""

from . import pool
from .arena import Arena, fix_malloc_threshold
from .budget import Available, BudgetError, Fixed, Schedule, format_size, parse_size, size_setting, source_from_config
from .fit import Fitter, Option
from .planner import MemoryPlan, plan_memory
from .report import describe
from .rss import StepRss, peak_rss_bytes, rss_bytes

__all__ = [
    "Arena",
    "Available",
    "BudgetError",
    "Fixed",
    "Schedule",
    "format_size",
    "parse_size",
    "size_setting",
    "source_from_config",
    "Fitter",
    "Option",
    "MemoryPlan",
    "plan_memory",
    "describe",
    "fix_malloc_threshold",
    "StepRss",
    "peak_rss_bytes",
    "rss_bytes",
    "pool",
]
