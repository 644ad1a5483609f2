#!/usr/bin/python3
"""An independent reimplementation of ddp::data::SyntheticClassification's documented algorithm,
the source of the values datasets_test.cpp pins (sample 3 of seed 7, shape [1, 28, 28], 10 classes).

    /usr/bin/python3 tests/torch/data/synthetic_reference.py [seed index]
prints the label and inputs 0, 100 and 783 as multiples of 2^-23.
"""
import sys

M = (1 << 64) - 1


class SplitMix64:
    def __init__(self, state):
        self.state = state & M

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        return z ^ (z >> 31)

    def uniform_steps(self):  # the value in [-1, 1) times 2^23
        return (self.next() >> 40) - (1 << 23)


def stream_state(seed, stream):
    mix = SplitMix64(seed ^ ((stream * 0xD1B54A32D192ED03) & M))
    mix.next()
    return mix.next()


def sample(seed, index, numel=784, classes=10):
    teacher = SplitMix64(stream_state(seed, M))
    w = [teacher.uniform_steps() / 2**23 for _ in range(classes * numel)]
    rng = SplitMix64(stream_state(seed, index))
    steps = [rng.uniform_steps() for _ in range(numel)]
    x = [s / 2**23 for s in steps]
    scores = []
    for c in range(classes):
        score = 0.0
        for k in range(numel):
            score += w[c * numel + k] * x[k]
        scores.append(score)
    label = max(range(classes), key=lambda c: scores[c])  # the first of equal scores, as in C++
    return label, steps


if __name__ == "__main__":
    seed, index = (int(a) for a in sys.argv[1:3]) if len(sys.argv) == 3 else (7, 3)
    label, steps = sample(seed, index)
    print("label", label, "steps", steps[0], steps[100], steps[783])
