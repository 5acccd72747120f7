"""docs/results.md is what scripts/results.py makes of bench/results/*.json: a figure in the
docs cannot drift from the run that measured it."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("results_doc", ROOT / "scripts" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_doc_is_generated_from_the_bench_json():
    script = _script()
    assert (ROOT / "docs" / "results.md").read_text() == script.render(), (
        "docs/results.md is out of date: run python scripts/results.py"
    )


def test_every_result_names_its_command_machine_and_load():
    import json

    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        data = json.loads(path.read_text())
        for key in ("command", "time", "load_average_at_end", "rows"):
            assert key in data, f"{path.name}: no {key!r}"
        assert data["rows"], f"{path.name}: no rows"
