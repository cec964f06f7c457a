"""How many examples a property test draws: its CI count times ``TEAMTR_FUZZ_SCALE`` (1 in
``make test``, 20 in ``make test-fuzz``)."""

import os


def examples(n: int) -> int:
    """``n`` examples in CI, ``n * TEAMTR_FUZZ_SCALE`` when fuzzing."""
    return n * int(os.environ.get("TEAMTR_FUZZ_SCALE", "1"))
