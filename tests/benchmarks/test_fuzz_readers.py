"""benchmarks/fuzz_readers.py: mutated LeRobot datasets, policy checkpoints, MSP frames and Betaflight SITL packets
are each read or refused with a one-line error (no other exception, no hang), and the mutations reach both; the
harness classifies what readers do."""

import time

import pytest


@pytest.fixture
def fuzz(benchmark):
    return benchmark("fuzz_inputs"), benchmark("fuzz_readers")


@pytest.mark.filterwarnings("ignore")  # corrupt inputs warn (zero-element tensors, NaN cast to int)
@pytest.mark.parametrize("reader", ["dataset", "checkpoint", "msp", "sitl"])
def test_every_mutated_input_is_read_or_refused_in_one_line(fuzz, reader, one_thread):
    fuzz_inputs, fuzz_readers = fuzz
    target = fuzz_readers.TARGETS[reader]()
    try:
        tally = fuzz_inputs.fuzz(target, range(300), seed=0)
    finally:
        target.close()
    assert tally.bad == 0, tally.examples[:5]
    assert tally.counts["read"] > 0 and tally.counts["refused"] > 0, tally.counts


class Scripted:
    """A target whose input i does ``behaviours[i]``."""

    name = "scripted"

    def __init__(self, behaviours):
        self.behaviours, self.i = behaviours, -1

    def case(self, rng):
        self.i += 1
        return str(self.i), self.behaviours[self.i]

    def refused(self, exc):
        return type(exc) is ValueError

    def close(self):
        pass


def _raise(exc):
    def read():
        raise exc
    return read


def test_the_harness_classifies_reads_refusals_other_exceptions_and_hangs(fuzz):
    fuzz_inputs, _ = fuzz
    behaviours = [lambda: None, lambda: False, _raise(ValueError("x.json: bad")), _raise(ValueError("two\nlines")),
                  _raise(KeyError("fps")), _raise(TypeError("x")), lambda: time.sleep(5)]
    tally = fuzz_inputs.fuzz(Scripted(behaviours), range(len(behaviours)), limit=0.2)
    assert tally.counts == {"read": 1, "refused": 2, "other": 3, "hang": 1}
    assert [i for i, _, _ in tally.examples] == [3, 4, 5, 6]


def test_mutations_are_reproducible_and_change_the_input(fuzz):
    fuzz_inputs, _ = fuzz
    valid = b'{"fps": 10, "features": {"a": {"dtype": "float32", "shape": [2]}}}'
    a = [fuzz_inputs.mutate_json(valid, fuzz_inputs.case_rng(0, i)) for i in range(50)]
    assert a == [fuzz_inputs.mutate_json(valid, fuzz_inputs.case_rng(0, i)) for i in range(50)]
    assert sum(m != valid for m in a) >= 45 and sum(fuzz_inputs.mutate(valid, fuzz_inputs.case_rng(1, i)) != valid
                                                     for i in range(50)) >= 45
