"""The serving SavedModel: ``serving_default`` takes serialized ``tf.Example``s, as the shards hold.

The trainer exports it (:func:`export_serving_model`); evaluation, the model registry and a
serving system load it. Parsing and decoding are the reader's own (:class:`FeatureDecoder`), so
what is served is what was trained on.
"""

from __future__ import annotations

from typing import Any

from tfrecord_suite.schema import Schema
from tfrecord_suite.train.feature_decoder import FeatureDecoder


def export_serving_model(
    model: Any, decoder: FeatureDecoder, schema: Schema, path: str, preprocessor: Any = None
) -> None:
    """Export a SavedModel whose ``serving_default`` takes serialized ``tf.Example``s.

    With a ``preprocessor`` (the feature-config transforms) the signature runs it in front of the
    model, exactly as the training input pipeline did.
    """
    import keras
    import tensorflow as tf

    from tfrecord_suite.train import features

    classes = tf.constant(schema.label_classes or [""])
    transform = features.transform_fn(preprocessor) if preprocessor is not None else None

    def serve(examples: Any) -> Any:
        parsed = tf.io.parse_example(examples, decoder.serving_spec)
        inputs = decoder.features(parsed)
        if transform is not None:
            inputs = transform(inputs)
        out = model(inputs, training=False)
        if schema.label_classes:
            class_id = tf.argmax(out, axis=-1)
            return {
                "probabilities": out,
                "class_id": class_id,
                "class_name": tf.gather(classes, class_id),
            }
        return {"prediction": out}

    archive = keras.export.ExportArchive()
    archive.track(model)
    if preprocessor is not None:
        archive.track(preprocessor)
    archive.add_endpoint(
        "serving_default",
        serve,
        input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
    )
    archive.write_out(path, verbose=False)
