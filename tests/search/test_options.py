from dataclasses import dataclass, replace

import pytest

from lumos.search import CompileOptions


def test_defaults_follow_the_design():
    o = CompileOptions()
    assert (o.limit, o.generation_size, o.mutations, o.trials, o.keep_best, o.seed) == \
        (100, 10, 10, 3, 1, 0)
    assert o.dim_buckets == {} and o.search_time_limit == 60.0
    assert o.matmul_precision == "highest" and not o.flush_denormals
    assert o.search == "kernels" and o.seeds


@pytest.mark.parametrize("change, message", [
    ({"limit": -1}, "limit must be an int >= 0, got -1"),
    ({"search": "beam"}, "search must be one of 'kernels', 'genetic'"),
    ({"seeds": 1}, "seeds must be True or False"),
    ({"generation_size": True}, "generation_size must be an int >= 1"),
    ({"mutations": 1.5}, "mutations must be an int >= 1"),
    ({"keep_best": -1}, "keep_best"),
    ({"trials": 0}, "trials"),
    ({"seed": "0"}, "seed must be an int"),
    ({"candidate_timeout": 0}, "candidate_timeout must be a positive number"),
    ({"execution_timeout": float("nan")}, "execution_timeout"),
    ({"search_time_limit": -1.0}, "search_time_limit"),
    ({"early_stop_factor": 0.5}, "early_stop_factor must be a number >= 1"),
    ({"max_enodes": 0}, "max_enodes"),
    ({"matmul_precision": "medium"}, "matmul_precision must be one of 'highest', 'high'"),
    ({"dim_buckets": [(1, 2, 1)]}, "must map dim names"),
    ({"dim_buckets": {"s": []}}, r"dim_buckets\['s'\] must be a non-empty list"),
    ({"dim_buckets": {"s": [(1, 8)]}}, "a bucket is"),
    ({"dim_buckets": {"s": [(4, 8, 9)]}}, "min <= representative <= max"),
    ({"dim_buckets": {"s": [(1, 8, 4), (8, 16, 12)]}}, "buckets overlap"),
    ({"dim_buckets": {"s": [(1, None, 4), (8, 16, 12)]}}, "buckets overlap"),
])
def test_bad_values_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        CompileOptions(**change)
    with pytest.raises(ValueError, match=message):
        replace(CompileOptions(), **change)


def test_dim_buckets_accept_objects_and_tuples():
    @dataclass
    class DimBucket:
        min: int
        max: int | None
        representative: int

    o = CompileOptions(dim_buckets={"s": [DimBucket(65, None, 512), (1, 64, 32)]})
    assert o.dim_buckets == {"s": ((1, 64, 32), (65, None, 512))}
