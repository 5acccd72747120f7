"""`dsptrain plot`: a PNG with the four panels, two runs overlaid and labelled by name."""

import json

import matplotlib.image
import pytest
from dsptrain.cli import main
from dsptrain.errors import DataError, UserError
from dsptrain.plot import PANEL_TITLES, load_metrics, plot_runs
from matplotlib.backends.backend_agg import FigureCanvasAgg


def test_plot_two_runs_draws_every_panel_with_both_runs(trained, tmp_path):
    niti, fp32 = trained("niti-run", "niti"), trained("fp32-run", "fp32")
    out = tmp_path / "compare.png"
    fig = plot_runs([niti, fp32], out)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == list(PANEL_TITLES)
    for ax in axes:
        labels = [line.get_label() for line in ax.get_lines()]
        assert any(label.startswith("niti-run") for label in labels), (ax.get_title(), labels)
        assert any(label.startswith("fp32-run") for label in labels), (ax.get_title(), labels)
    time_ax, energy_ax, memory_ax, acc_ax = axes
    steps = len(load_metrics(niti).steps)
    assert steps == 6  # 160 samples, batch 64: 3 batches x 2 epochs
    assert len(time_ax.get_lines()[0].get_xdata()) == steps
    assert "estimate:sd865" in energy_ax.get_ylabel()  # the meter is named
    assert len(acc_ax.get_lines()[0].get_xdata()) == 2  # two epochs
    assert "niti-run" in fig.texts[0].get_text() and "fp32-run" in fig.texts[0].get_text()
    image = matplotlib.image.imread(out)
    assert image.shape[:2] == (800, 1200)
    # the title sits inside the picture: its bounding box ends within the figure
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = fig.texts[0].get_window_extent(renderer)
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


def test_plot_command_writes_the_file_it_prints(trained, tmp_path, capsys):
    run = trained("one", epochs=1)
    assert main(["plot", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "plot.png")
    assert (run / "plot.png").stat().st_size > 10_000
    out = tmp_path / "svg" / "x.svg"
    assert main(["plot", str(run), str(run), "--out", str(out), "--debug"]) == 0
    assert out.read_text().lstrip().startswith("<?xml")


def test_plot_refuses_a_directory_without_metrics_and_a_bad_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsptrain: error:") and "nothing" in err and "metrics.jsonl" in err
    run = tmp_path / "broken"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "step", "step": 0}) + "\n{oops\n")
    with pytest.raises(DataError, match=r"metrics.jsonl: line 2 is not JSON"):
        load_metrics(run)
    with pytest.raises(UserError):
        load_metrics(tmp_path)
