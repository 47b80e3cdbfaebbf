"""Fixtures shared by the test modules."""

import pytest
import torch


@pytest.fixture
def one_torch_thread():
    """Tiny problems on one torch thread: the intra-op thread pool only adds spin-waits,
    which on a loaded machine make a 0.4 s run take 20 s; and pinned numbers were made
    with one thread (other thread counts may change float sums in the last bits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
