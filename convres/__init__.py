"""convres: the companion package of *On the Convergence of Gradient Descent on Learning
Transformers with Residual Connections* (Qin, Zhou, Jiang, Zhu; arXiv:2506.05249).

The model, exact gradient descent, the theory's computable quantities, data, experiments, figures
and explorers of the book; each module imports only from the layers below (``tests/test_layers.py``).
"""

from ._version import __version__  # noqa: I001 (the names of model on two lines, not twelve)
from .gd import History, Run, gradient_descent, sweep
from .instances import synthetic_regression
from .model import ACTIVATIONS, SCALES, ModelConfig, attention, check_inputs, forward, forward_trace
from .model import init_params, loss, phi

__all__ = [
    "__version__", "ACTIVATIONS", "SCALES", "ModelConfig", "attention", "check_inputs", "forward",
    "forward_trace", "init_params", "loss", "phi", "History", "Run", "gradient_descent", "sweep",
    "synthetic_regression",
]
