"""``onceproof.blocks.row_blocks``: the row ranges every blockwise loop of the checker walks."""

import pytest

from onceproof.blocks import row_blocks


@pytest.mark.parametrize("n,size", [(0, 4), (1, 4), (4, 4), (5, 4), (10, 3), (7, 1)])
def test_row_blocks_cover_every_row_once_in_order(n, size):
    ranges = list(row_blocks(n, size))
    rows = [i for a, b in ranges for i in range(a, b)]
    assert rows == list(range(n))
    assert all(0 < b - a <= size for a, b in ranges)
    assert all(b - a == size for a, b in ranges[:-1])


def test_a_block_of_no_rows_is_refused():
    with pytest.raises(ValueError, match="at least 1 row"):
        row_blocks(10, 0)
