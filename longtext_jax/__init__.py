"""longtext_jax: long-document encoders in JAX/Flax behind one encoder API.

``Model``, ``build_model`` and ``EncoderOutput`` are read lazily (module ``__getattr__``), so
``import longtext_jax.encoders`` does not import the model, the tasks or the trainer.
"""
__version__ = "0.1.0"

_LAZY = {"Model": "longtext_jax.model", "build_model": "longtext_jax.model",
         "EncoderOutput": "longtext_jax.encoders.base"}


def __getattr__(name: str):
  """Imports ``Model``, ``build_model`` and ``EncoderOutput`` on first access."""
  if name in _LAZY:
    import importlib  # pylint: disable=import-outside-toplevel
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'longtext_jax' has no attribute {name!r}")


__all__ = ["Model", "build_model", "EncoderOutput", "__version__"]
