"""Which tools have an effect: the registry lives in the library (:mod:`workflow.effect`)."""

from workflow.effect import effectful, function_identity, is_effectful  # noqa: F401
