"""dlrm_exp: a Hydra-configured experiment framework for training DLRM models with TorchRec."""

__version__ = "0.1.0"

from dlrm_exp.util.fbgemm_compat import drop_tested_fbgemm_warning  # noqa: E402

drop_tested_fbgemm_warning()  # before anything imports FBGEMM, which warns while imported
