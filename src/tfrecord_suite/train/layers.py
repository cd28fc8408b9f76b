"""Keras layers of the built-in model that Keras lacks (registered, so ``model.keras`` reloads)."""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="tfrecord_suite")
class TrainingCrop(keras.layers.Layer):
    """A random ``height x width`` window while training, the central one otherwise.

    Keras 3's ``RandomCrop`` returns its input unchanged at inference, so a model trained on crops
    would be served whole images of another size; this keeps both at the cropped size. Images that
    already have the crop size pass unchanged: for JPEG datasets the reader decodes the random
    training window alone (fused decode and crop), so training batches arrive cropped, while
    evaluation and serving still feed whole images that this crops at the centre.
    """

    def __init__(self, height: int, width: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.height, self.width = height, width
        self._random = keras.layers.RandomCrop(height, width)
        self._center = keras.layers.CenterCrop(height, width)

    def build(self, input_shape: Any) -> None:
        """Build the two crops (they hold no weights)."""
        self._random.build(input_shape)
        self._center.build(input_shape)

    def call(self, images: Any, training: bool = False) -> Any:
        """Crop a batch of images (a batch already of the crop size passes unchanged)."""
        if tuple(images.shape[-3:-1]) == (self.height, self.width):
            return images
        return self._random(images, training=True) if training else self._center(images)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The cropped shape."""
        return (*input_shape[:-3], self.height, self.width, input_shape[-1])

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments, for saving."""
        return {**super().get_config(), "height": self.height, "width": self.width}
