"""A pytest plugin (``-p otca_plugin_loaded``): VeRL-Omni's own tests run with the OTCA plug-in loaded as a
training run loads it, through verl's ``import_external_libs`` (``actor_rollout_ref.model.external_lib``).
Load it after ``vllm_import_stand_in``."""
import verl_omni  # noqa: F401  (the plug-in binds only inside a VeRL-Omni process)
from verl.utils.import_utils import import_external_libs
from verl_omni.trainer.diffusion.diffusion_algos import DIFFUSION_ADV_ESTIMATOR_REGISTRY

import_external_libs("otca_patch.verl_omni")
if "otca" not in DIFFUSION_ADV_ESTIMATOR_REGISTRY:
    raise RuntimeError("otca_plugin_loaded: loading otca_patch.verl_omni registered no estimator 'otca'")
