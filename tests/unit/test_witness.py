"""Witness rows: which expectations they can decide and which rows decide them (hand-built batches)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from clustercert.validation.witness import MAX_GROUPS, condition_columns, witness_rows, witnessed

COLUMNS = ["metric", "gpu", "value", "time_s", "_line"]


@pytest.mark.parametrize(("condition", "read"), [
    ('metric in ["DCGM_FI_DEV_GPU_TEMP", "GTEMP"]', ("metric",)),
    ('metric.str.startswith("DCGM_FI_PROF_") or metric in ["SMACT", "SMOCC"]', ("metric",)),
    ('not (gpu == "3") and value >= -1.5e3', ("gpu", "value")),
    ("metric == 'a \"quoted\" name'", ("metric",)),
])
def test_row_wise_conditions_name_the_columns_they_read(condition: str, read: tuple[str, ...]) -> None:
    assert condition_columns(condition, COLUMNS) == read


@pytest.mark.parametrize("condition", [
    "value > value.mean()",  # an aggregate: a row's verdict depends on the other rows
    "metric.str.len() > 3",  # a method other than the string predicates
    "value > @limit",  # a local variable
    "node == 'n1'",  # a column the table does not have
    "value ** 2 > 4",  # an operator outside the comparisons
])
def test_other_conditions_are_left_to_the_whole_batches(condition: str) -> None:
    assert condition_columns(condition, COLUMNS) is None
    kwargs = {"column": "value", "min_value": 0, "row_condition": condition, "condition_parser": "pandas"}
    assert witnessed("expect_column_values_to_be_between", kwargs, COLUMNS) is None


def test_only_ranges_and_null_checks_without_mostly_are_witnessed() -> None:
    between = "expect_column_values_to_be_between"
    assert witnessed(between, {"column": "value", "min_value": 0}, COLUMNS) == ("value", ())
    assert witnessed(between, {"column": "value", "min_value": 0, "mostly": 0.9}, COLUMNS) is None
    assert witnessed(between, {"column": "power", "min_value": 0}, COLUMNS) is None
    assert witnessed("expect_column_values_to_be_in_set", {"column": "gpu", "value_set": ["0"]}, COLUMNS) is None
    assert witnessed("expect_column_values_to_not_be_null", {"column": "gpu"}, COLUMNS) == ("gpu", ())


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "metric": ["T", "P", "T", "P", "T", "P", None, "T"],
        "gpu": ["0", "0", "1", "1", None, "2", "2", "3"],
        "value": [60.0, 700.0, 95.0, 650.0, 40.0, np.nan, 1.0, 95.0],
        "time_s": [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0],
        "_line": np.arange(1, 9, dtype=np.int64),
    })


def test_a_range_is_witnessed_by_each_groups_extremes_and_the_first_nulls() -> None:
    rows, undecided = witness_rows(_frame(), [("expect_column_values_to_be_between", "value", ("metric",))])
    # row 0; the first null of gpu (4), value (5) and metric (6); T: min 40 (4), max 95 (2, before 7);
    # P: min 650 (3), max 700 (1); the null metric's group: 1.0 (6)
    assert rows.tolist() == [0, 1, 2, 3, 4, 5, 6] and undecided == set()


def test_a_null_check_is_witnessed_by_each_groups_first_null_and_first_value() -> None:
    frame = _frame()
    rows, _ = witness_rows(frame, [("expect_column_values_to_not_be_null", "gpu", ("metric",))])
    assert rows.tolist() == [0, 1, 4, 5, 6]
    assert frame.iloc[rows]["gpu"].isna().sum() == 1


def test_a_range_over_text_or_too_many_groups_is_not_decided() -> None:
    frame = _frame()
    _, undecided = witness_rows(frame, [("expect_column_values_to_not_be_null", "gpu", ()),
                                        ("expect_column_values_to_be_between", "metric", ())])
    assert undecided == {1}
    many = pd.DataFrame({"key": np.arange(MAX_GROUPS + 1), "value": np.ones(MAX_GROUPS + 1)})
    _, undecided = witness_rows(many, [("expect_column_values_to_be_between", "value", ("key",))])
    assert undecided == {0}
