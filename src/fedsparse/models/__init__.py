"""Neural network models and the layout of their flat parameter vectors.

>>> import torch
>>> import fedsparse as fs
>>> net = fs.models.mlp(784, (100,), 10)            # FedMac's DNN, 79,510 parameters
>>> problem = fs.problems.neural(net)
>>> x0 = problem.init_params(seed=0, dtype=torch.float32)   # (79510,)
"""

from .layout import PRUNABLE_TYPES, ParamLayout
from .zoo import VGG_SMALL_CFG, ResNet20, cnn, count_parameters, mlp, resnet20, vgg_small

#: Builders by name, as used in experiment configs (``problem.model.kind``).
REGISTRY = {"mlp": mlp, "cnn": cnn, "vgg_small": vgg_small, "resnet20": resnet20}

__all__ = ["PRUNABLE_TYPES", "REGISTRY", "VGG_SMALL_CFG", "ParamLayout", "ResNet20", "cnn",
           "count_parameters", "mlp", "resnet20", "vgg_small"]
