"""convres: the companion package of *On the Convergence of Gradient Descent on Learning
Transformers with Residual Connections* (Qin, Zhou, Jiang, Zhu; arXiv:2506.05249).

The model, exact full-batch gradient descent, the theory's computable quantities, data loaders,
experiments, plots and explorers (Vega-Lite charts drawn from precomputed grids, see
:mod:`convres.explorers`) used by the book in ``book/``.
"""

__version__ = "0.2.0"

from .model import (ACTIVATIONS, SCALES, ModelConfig, attention, check_inputs, forward,  # noqa: E402
                    forward_trace, init_params, loss)
from .gd import History, Run, gradient_descent  # noqa: E402
from .data import synthetic_regression  # noqa: E402

__all__ = [
    "__version__", "ACTIVATIONS", "SCALES", "ModelConfig", "attention", "check_inputs", "forward",
    "forward_trace", "init_params", "loss", "History", "Run", "gradient_descent",
    "synthetic_regression",
]
