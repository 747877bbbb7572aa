"""Model definitions in the repo and their import through TVM's Relax frontends.

* :mod:`.torch_models`: MLP, GCN, MobileNet-v1 stack, GRU, ResNet-50 bottleneck (PyTorch);
* :mod:`.onnx_models`: MLP, bottleneck and GCN graphs built with ``onnx.helper``;
* :mod:`.frontends`: ``from_onnx`` / ``from_torch`` / ``load_model`` with clear errors;
* :mod:`.zoo`: the five models at ``tiny`` / ``small`` / ``full`` sizes.

torch and onnx are optional: names load lazily and say what to install.

>>> from tvm_ext.models import MODEL_NAMES
>>> MODEL_NAMES
('mlp', 'gcn', 'mobilenet', 'gru', 'bottleneck')
"""
from __future__ import annotations

from tvm_ext.lazy_exports import lazy_getattr


from tvm_ext.models.zoo import MODEL_NAMES, SIZES, ModelCase, get_model

_LAZY = {
    "MissingDependencyError": "tvm_ext.models.frontends",
    "from_onnx": "tvm_ext.models.frontends",
    "load_onnx": "tvm_ext.models.frontends",
    "from_torch": "tvm_ext.models.frontends",
    "load_model": "tvm_ext.models.frontends",
    "onnx_reference": "tvm_ext.models.frontends",
    "torch_reference": "tvm_ext.models.frontends",
    "mlp_onnx": "tvm_ext.models.onnx_models",
    "bottleneck_onnx": "tvm_ext.models.onnx_models",
    "gcn_onnx": "tvm_ext.models.onnx_models",
}

__all__ = ["MODEL_NAMES", "SIZES", "ModelCase", "get_model", *_LAZY]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
