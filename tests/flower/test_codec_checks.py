"""What :func:`fedsparse.flower.codec.decode` refuses before a payload reaches torch: a
shape other than the receiver expects, and values of another dtype than declared."""

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord  # noqa: E402

from fedsparse.flower import codec  # noqa: E402

pytestmark = pytest.mark.flower


def test_a_payload_of_more_rows_than_expected_is_refused():
    # two rows of 4 are not the expected single row of 4, though their last axes agree
    arrays, meta = codec.encode(torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 0.0, 0.0]]),
                                "sparse")
    assert codec.decode(arrays, meta, expected_shape=(2, 4)).shape == (2, 4)
    with pytest.raises(codec.MalformedPayload, match=r"\[2, 4\] differs from the expected \[4\]"):
        codec.decode(arrays, meta, expected_shape=(4,))


def test_values_of_another_dtype_of_the_same_width_are_refused():
    # int32 and float32 are both 4 bytes a value, but the bits of 1 as int32 are not 1.0
    meta = ConfigRecord({"encoding": "dense", "shape": [4], "dtype": "float32", "nnz": [4]})
    good = ArrayRecord({"value": Array(np.array([1, 2, 3, 4], dtype=np.float32))})
    assert codec.decode(good, meta).tolist() == [1.0, 2.0, 3.0, 4.0]
    bad = ArrayRecord({"value": Array(np.array([1, 2, 3, 4], dtype=np.int32))})
    with pytest.raises(codec.MalformedPayload, match="values are int32, but the metadata says "
                                                     "float32"):
        codec.decode(bad, meta)
