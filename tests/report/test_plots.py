import matplotlib.pyplot as plt
import pytest
from matplotlib.ticker import MaxNLocator

from fedsparse.history import History
from fedsparse.report.plots import (
    format_bytes,
    panels_figure,
    plot_panels,
    plot_sweep,
    spans_decades,
    sweep_figure,
)


def _history(objectives, bytes_per_round=100):
    records = [{"round": t + 1, "objective": v, "bytes_total": bytes_per_round * (t + 1)}
               for t, v in enumerate(objectives)]
    return History(records=records, initial={"round": 0, "objective": 1.0, "bytes_total": 0})


def _legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (512, "512 B"), (1500, "1.5 KB"),
                                             (2_000_000, "2 MB"), (3.2e9, "3.2 GB")])
def test_format_bytes(value, text):
    assert format_bytes(value) == text


def test_spans_decades_ignores_zero_and_none():
    assert spans_decades([0, None, 10, 10_000], 3)
    assert not spans_decades([0, 10, 9_000], 3)


def test_identical_curves_stay_visible_and_are_named_in_the_legend():
    a, b, c = _history([0.5, 0.3, 0.2]), _history([0.5, 0.3, 0.2]), _history([0.6, 0.5, 0.4])
    fig = panels_figure({"": {"A": a, "B": b, "C": c}}, y="objective", x="round")
    ax = fig.axes[0]
    assert _legend_texts(ax) == ["A", "B (coincides with A)", "C"]
    lines = ax.get_lines()
    styles = {(ln.get_linestyle(), ln.get_marker()) for ln in lines}
    assert len(styles) == 3  # the two equal curves differ in line style and marker
    # round ticks are integers and the untitled panel says what it shows
    assert isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert ax.get_title() == "objective vs round"
    plt.close(fig)


def test_reference_line_and_note_say_where_f_star_comes_from():
    fig = panels_figure({"": {"A": _history([0.5, 0.3])}}, y="objective", x="round",
                        reference=0.1, reference_label="f* (500 rounds of Distributed-IHT)",
                        note="f* = lowest objective of a 500-round run")
    ax = fig.axes[0]
    assert "f* (500 rounds of Distributed-IHT)" in _legend_texts(ax)
    assert ax.get_xlabel().endswith("f* = lowest objective of a 500-round run")
    plt.close(fig)


def test_a_narrow_log_axis_labels_only_2_and_5_between_decades():
    from fedsparse.report.axes import _plain_2_5

    assert [_plain_2_5(v) for v in (0.02, 0.03, 0.05, 0.07, 200, 300)] == \
        ["0.02", "", "0.05", "", "200", ""]


def test_a_log_axis_within_half_a_decade_labels_every_tick():
    from fedsparse.report.axes import style_axis

    for values, expected in (([0.69, 0.5, 0.35], ["0.4", "0.5", "0.6", "0.7"]),
                             ([24.0, 12.0, 6.0], ["10", "20"])):  # 0.6 decades: 2 and 5
        fig = plt.figure()
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(range(3), values)
        style_axis(ax, "objective", values, which="y", log=True)
        fig.canvas.draw()
        low, high = ax.get_ylim()
        shown = [t.get_text() for t in ax.get_yticklabels(minor=False)
                 + ax.get_yticklabels(minor=True)
                 if t.get_text() and low <= t.get_position()[1] <= high]
        assert sorted(shown, key=float) == expected
        plt.close(fig)


def test_bytes_axis_in_units_and_log_when_it_spans_decades():
    cheap, dense = _history([0.5, 0.3, 0.2], 100), _history([0.5, 0.3, 0.2], 1_000_000)
    fig = panels_figure({"p": {"sparse": cheap, "dense": dense}}, y="objective",
                        x="bytes_total")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert any("KB" in s for s in labels) and any("MB" in s for s in labels), labels
    plt.close(fig)
    fig = panels_figure({"p": {"one": cheap}}, y="objective", x="bytes_total")
    assert fig.axes[0].get_xscale() == "linear"  # 100 B .. 300 B: no decades to span
    plt.close(fig)


def test_long_titles_are_wrapped_inside_the_figure():
    title = "A deliberately long figure title that would run off both edges of a " \
            "single-panel figure if nobody wrapped it " * 2
    fig = panels_figure({"a panel name that is also rather long for one small axes": {
        "A": _history([0.5, 0.3])}}, y="objective", x="round", title=title)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for text in (fig._suptitle, fig.axes[0].title):
        ext = text.get_window_extent(renderer)
        assert ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1, text.get_text()
        assert ext.y1 <= box.y1 + 1
    plt.close(fig)


def test_mean_over_seeds_draws_a_band_and_says_so(tmp_path):
    from fedsparse.experiments.seeds import mean_history

    seeds = [_history([0.5, 0.3, 0.2]), _history([0.7, 0.5, 0.4]), _history([0.6, 0.4, 0.3])]
    for s, h in enumerate(seeds):
        h.config["seed"] = s
    mean = mean_history(seeds, [None, None, None])
    fig = panels_figure({"": {"FedAvg": mean}}, y="objective", x="round")
    ax = fig.axes[0]
    assert ax.get_legend().get_title().get_text() == "mean ± std over 3 seeds"
    assert len(ax.collections) == 1  # the shaded band
    plt.close(fig)
    assert plot_panels({"": {"FedAvg": mean}}, y="objective", x="round",
                       path=tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 0


def test_nothing_to_plot_writes_nothing(tmp_path):
    assert not plot_panels({"": {"A": _history([0.5])}}, y="accuracy", x="round",
                           path=tmp_path / "a.png")
    assert not (tmp_path / "a.png").exists()


def test_sweep_plot_uses_a_log_grid_axis_and_marks_divergence(tmp_path):
    table = {"A": [{"x": 1e-4, "value": 0.6, "std": None, "diverged": False},
                   {"x": 0.05, "value": 0.2, "std": None, "diverged": False},
                   {"x": 50, "value": None, "std": None, "diverged": True}]}
    fig = sweep_figure(table, field="algorithm.step_size", metric="objective")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert "diverged" in _legend_texts(ax)
    assert "lower is better" in ax.get_title()
    plt.close(fig)
    path = tmp_path / "s.png"
    assert plot_sweep(table, field="algorithm.step_size", metric="objective", path=path)
    assert path.exists()
    table["A"] = [dict(p, value=None, diverged=True) for p in table["A"]]
    assert not plot_sweep(table, field="f", metric="objective", path=tmp_path / "none.png")


def test_a_95_percent_interval_band_by_hand():
    import numpy as np

    from fedsparse.experiments.seeds import mean_history
    from fedsparse.report.plots import band_halfwidth

    # n = 3, std 0.1: t_{0.975, 2} = 4.302653 (tables), half-width 4.302653 * 0.1 / sqrt(3)
    assert band_halfwidth(np.array([0.1]), 3, "ci95")[0] == pytest.approx(0.248414, abs=1e-6)
    assert band_halfwidth(np.array([0.1]), 3, "std")[0] == 0.1
    assert band_halfwidth(np.array([0.1]), 1, "ci95")[0] == 0.0  # no interval from one seed
    seeds = [_history([0.5, 0.3, 0.2]), _history([0.7, 0.5, 0.4]), _history([0.6, 0.4, 0.3])]
    for s, h in enumerate(seeds):
        h.config["seed"] = s
    mean = mean_history(seeds, [None, None, None])
    fig = panels_figure({"": {"FedAvg": mean}}, y="objective", x="round", band="ci95")
    ax = fig.axes[0]
    assert ax.get_legend().get_title().get_text() == "mean, 95% CI over 3 seeds"
    vertices = ax.collections[0].get_paths()[0].vertices
    at_round_1 = vertices[vertices[:, 0] == 1, 1]
    # round 1: mean 0.6, std 0.1
    assert at_round_1.max() == pytest.approx(0.6 + 0.248414, abs=1e-5)
    assert at_round_1.min() == pytest.approx(0.6 - 0.248414, abs=1e-5)
    plt.close(fig)
