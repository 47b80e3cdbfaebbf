"""A Ctrl-C recorded by the command line stops a run within a round even if the
KeyboardInterrupt it raised was dropped (inside a finaliser, Python prints and drops it)."""

import signal

import pytest
import torch

import fedsparse as fs
from fedsparse import interrupts


def _data():
    return fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2,
                                    seed=0, dtype=torch.float64)


def test_a_dropped_interrupt_stops_the_run_at_the_next_round():
    rounds_seen = []

    def drop_an_interrupt(record, state=None):
        rounds_seen.append(record["round"])
        if record["round"] == 2:
            with pytest.raises(KeyboardInterrupt):  # the raise that a finaliser would drop
                signal.getsignal(signal.SIGINT)(signal.SIGINT, None)

    with interrupts.recorded_interrupts():
        with pytest.raises(KeyboardInterrupt):
            fs.simulate(fs.algorithms.fed_ht(sparsity=2, step_size=0.01),
                        fs.problems.least_squares(), _data(), rounds=10,
                        callback=drop_an_interrupt)
    assert rounds_seen == [1, 2]


def test_outside_the_command_line_nothing_is_recorded_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    with interrupts.recorded_interrupts():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
    interrupts.check()  # nothing recorded: no raise
    history = fs.simulate(fs.algorithms.fed_ht(sparsity=2, step_size=0.01),
                          fs.problems.least_squares(), _data(), rounds=3)
    assert len(history.records) == 3
