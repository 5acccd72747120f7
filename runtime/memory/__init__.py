"""The memory-budget layer: every tensor's size and lifetime, one arena, and the cheapest
plan that fits a budget.

- planner.py: lifetimes, buffers and arena offsets of one step (`plan_memory`);
- recompute.py: which activations to drop and rebuild (checkpoint schedules);
- fit.py: the cheapest (micro-batch, recompute) option whose peak fits a budget;
- budget.py: budgets (fixed, scheduled, the OS's available memory) and sizes;
- arena.py: the arena itself, where tensors live as views;
- report.py: the text `dsptrain plan` prints.
"""
from .arena import Arena
from .budget import Available, BudgetError, Fixed, Schedule, format_size, parse_size, source_from_config
from .fit import Fitter, Option
from .planner import MemoryPlan, plan_memory

__all__ = ["Arena", "Available", "BudgetError", "Fixed", "Schedule", "format_size", "parse_size",
           "source_from_config", "Fitter", "Option", "MemoryPlan", "plan_memory"]
