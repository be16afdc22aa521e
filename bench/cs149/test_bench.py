"""bench.py's own logic on CPU (its timing needs a GPU): the A/B table it prints."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def test_variant_table_checks_the_default_by_its_own_key():
    # Run s10-10 printed FAILED on every default row: the default's check is check_ok, not flashkit_check_ok.
    rows = [{"problem": "rk4", "check_ok": True, "flashkit_ms": 60.0, "flashkit_l1_ms": 78.0,
             "flashkit_l1_check_ok": True},
            {"problem": "histogram", "check_ok": True, "flashkit_ms": 0.288},
            {"problem": "swiglu", "check_ok": False, "flashkit_ms": 13.0, "flashkit_v3_ms": 17.8,
             "flashkit_v3_check_ok": False}]
    lines = bench.variant_table(rows)
    assert lines[2:] == ["| rk4 | default | 60.000 | 1.00x | OK |",
                         "| rk4 | l1 | 78.000 | 0.77x | OK |",
                         "| histogram | default | 0.288 | 1.00x | OK |",
                         "| swiglu | default | 13.000 | 1.00x | FAILED |",
                         "| swiglu | v3 | 17.800 | 0.73x | FAILED |"]


def test_variant_table_without_a_default_time():
    lines = bench.variant_table([{"problem": "rk4", "check_ok": True, "flashkit_l1_ms": 78.0,
                                  "flashkit_l1_check_ok": True}])
    assert lines[2:] == ["| rk4 | l1 | 78.000 | - | OK |"]
