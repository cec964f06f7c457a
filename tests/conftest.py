"""Test session settings: never reach the network; small, deterministic models, float32 on every CPU;
derandomised property tests.

Hypothesis profiles (``TEAMTR_HYPOTHESIS``): ``ci`` (the default, ``make test``) derandomises every
property test (the same examples on every run, no example database), so a CI run cannot fail on an
example no earlier run drew; ``fuzz`` (``make test-fuzz``) draws fresh examples, 20x as many
(``examples()`` in ``tests/fuzz.py`` scales each test's count by ``TEAMTR_FUZZ_SCALE``).
"""

import os

from hypothesis import settings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# dtype: auto means float32 on every CPU under test (bf16 only where a CPU has AVX512-BF16/AMX would make
# exactness tolerances depend on the CI machine's kind); test_backbone tests the choice itself.
os.environ.setdefault("TEAMTR_CPU_BF16", "0")

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("TEAMTR_HYPOTHESIS", "ci"))
