"""Stands in for ``albumentations``, which the fork DanceGRPO-kontext's vendored ai-toolkit imports at
module level for its dataset augmentations. The dev environment lacks it, and a smoke run hands
``train_one_step`` its batches itself, so no augmentation runs: any use of it is an error saying so.
On the path after the environment's packages, so an installed albumentations is used instead."""


def __getattr__(name):
    raise ModuleNotFoundError(f"albumentations.{name}: albumentations is stood in by tests/upstream/"
                              "ai_toolkit_stand_ins (ai-toolkit's dataset augmentations do not run in a smoke run)")
