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


class CommandLine:
    """``fedsparse`` in-process: ``run(argv) -> (exit code, stdout, stderr)``, and
    ``refused(argv, *texts)``: exit code 2, no traceback, every text in stderr."""

    @staticmethod
    def run(argv: list[str]) -> tuple[int, str, str]:
        import contextlib
        import io

        from fedsparse.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code
        return code, out.getvalue(), err.getvalue()

    def refused(self, argv: list[str], *expected: str) -> str:
        code, _, err = self.run(argv)
        assert code == 2, err
        assert "Traceback" not in err
        for text in expected:
            assert text in err, (text, err)
        return err


@pytest.fixture
def cli():
    """:class:`CommandLine`."""
    return CommandLine()
