"""TeamTR: trust-region fine-tuning of a coordinator LLM that directs a team of agents."""

import importlib
import sys

__version__ = "0.1.0"


class _RegisterGymIds:
    """Registers the ``teamtr/...`` gymnasium ids once gymnasium is imported (``teamtr.gym``), so
    that ``import teamtr`` costs neither gymnasium's import time nor torch's. A meta path finder
    and loader by duck typing (importing ``importlib.abc`` would cost 30 ms)."""

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "gymnasium":
            return None
        import importlib.util  # here, not at the top: 10 ms that only gymnasium's import pays

        sys.meta_path.remove(self)
        found = importlib.util.find_spec(name)
        if found is not None and found.loader is not None:
            self.loader, found.loader = found.loader, self
        return found

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.loader.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        module.__spec__.loader = module.__loader__ = self.loader
        self.loader.exec_module(module)
        importlib.import_module("teamtr.gym")  # registers the ids (a partial import registers at its end)


if "gymnasium" in sys.modules:
    importlib.import_module("teamtr.gym")
elif not any(isinstance(finder, _RegisterGymIds) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterGymIds())
