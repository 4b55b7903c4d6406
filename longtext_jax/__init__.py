"""longtext_jax: long-document encoders in JAX/Flax behind one encoder API."""
__version__ = "0.1.0"

from longtext_jax.model import Model, build_model  # noqa: E402
from longtext_jax.encoders.base import EncoderOutput  # noqa: E402

__all__ = ["Model", "build_model", "EncoderOutput", "__version__"]
