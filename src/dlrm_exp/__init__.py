"""dlrm_exp: a Hydra-configured experiment framework for training DLRM models with TorchRec."""

__version__ = "0.1.0"
