"""The client x label heat map of a split."""

import numpy as np
import pytest

import fedsparse.report
from fedsparse.report.partition_plots import plot_partition


def test_plot_partition_writes_a_png(tmp_path):
    y = np.array(["cat", "dog", "cat", "eel", "dog"])
    parts = [np.array([0, 1]), np.array([2, 3, 4])]
    out = plot_partition(parts, y, tmp_path / "sub" / "p.png")
    assert out == tmp_path / "sub" / "p.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fedsparse.report.plot_partition is plot_partition


def test_plot_partition_refuses_indices_outside_the_labels(tmp_path):
    with pytest.raises(ValueError, match="outside"):
        plot_partition([np.array([9])], np.array([0, 1]), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
