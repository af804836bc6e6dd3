"""onceproof.spans: ids as spans for messages and tables."""

from onceproof.spans import spans


def test_consecutive_ids_become_one_span():
    assert spans([8, 1, 2, 3, 5, 7, 7]) == "1–3, 5, 7–8"


def test_no_ids_and_one_id():
    assert spans([]) == ""
    assert spans(iter([4])) == "4"
