"""The training report: curves as a PNG, and Markdown/HTML pages that embed it."""

from __future__ import annotations

import base64
import html
import io

from tfrecord_suite.io import storage
from tfrecord_suite.markdown import code
from tfrecord_suite.schema import Schema
from tfrecord_suite.train.metrics import TrainMetrics

CURVES_PNG = "training_curves.png"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"


def curves_png(history: dict[str, list[float]]) -> bytes:
    """Loss and metric per epoch (train and validation) as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in history if not k.startswith("val_") and k != "learning_rate"]
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.5), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        epochs = range(1, len(history[key]) + 1)
        ax.plot(epochs, history[key], marker="o", label="train")
        if f"val_{key}" in history:
            ax.plot(epochs, history[f"val_{key}"], marker="o", label="validation")
        ax.set_title(key)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def markdown(metrics: TrainMetrics, schema: Schema, png: bytes | None) -> str:
    """The report as Markdown (the image inline as a data URI, which the Kubeflow UI renders)."""
    lines = [
        f"# Training report: {metrics.dataset}",
        "",
        f"{code(metrics.strategy)} with {metrics.replicas} replica(s), global batch "
        f"{metrics.global_batch_size}, {metrics.epochs} epochs of "
        f"{metrics.steps_per_epoch} steps, {metrics.examples_per_second:.0f} "
        "examples/s.",
        "",
    ]
    lines += [
        "| split | " + " | ".join(code(name) for name in _metric_names(metrics)) + " |",
        "|---|" + "---:|" * len(_metric_names(metrics)),
    ]
    for split, values in metrics.evaluation.items():
        lines.append(
            f"| {split} | "
            + " | ".join(f"{values.get(k, float('nan')):.4f}" for k in _metric_names(metrics))
            + " |"
        )
    probe = metrics.input or {}
    if "input_wait_share" in probe:
        lines += [
            "",
            f"Input wait: {probe['input_wait_share']:.1%} of step time; real/synthetic "
            f"step time {probe['real_over_synthetic']:.2f}.",
        ]
    service = probe.get("service")
    if service:
        lines += ["", f"Training input through the tf.data service (`{service['input_service']}`)"]
        if "workers" in service:
            lines[-1] += (
                f": {service['workers']} local workers, "
                f"restarted {service['worker_restarts']} times"
            )
        lines[-1] += "."

    check = metrics.serving_check
    if check:
        lines += [
            "",
            f"Serving signature on raw test examples: accuracy {check['accuracy']:.4f} "
            f"over {check['examples']} examples.",
            "",
            "Confusion matrix (rows: true):",
            "",
            "| | " + " | ".join(code(name) for name in check["classes"]) + " |",
            "|---|" + "---:|" * len(check["classes"]),
        ]
        for name, row in zip(check["classes"], check["confusion_matrix"], strict=True):
            lines.append(f"| {code(name)} | " + " | ".join(str(v) for v in row) + " |")
    if png:
        lines += ["", f"![training curves](data:image/png;base64,{base64.b64encode(png).decode()})"]
    return "\n".join(lines) + "\n"


def _metric_names(metrics: TrainMetrics) -> list[str]:
    names: list[str] = []
    for values in metrics.evaluation.values():
        names.extend(k for k in values if k not in names)
    return names


def write_report(model_dir: str, metrics: TrainMetrics, schema: Schema) -> str:
    """Write the PNG, ``report.md`` and ``report.html`` into ``model_dir``; return the Markdown."""
    png = curves_png(metrics.history) if metrics.history else None
    if png:
        storage.write_bytes(storage.join(model_dir, CURVES_PNG), png)
    text = markdown(metrics, schema, png)
    storage.write_text(storage.join(model_dir, REPORT_MD), text)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(metrics.dataset)}"
        f"</title><pre>{html.escape(text.split('![')[0])}</pre>"
    )
    if png:
        data = base64.b64encode(png).decode()
        page += f"<img alt='training curves' src='data:image/png;base64,{data}'>"
    storage.write_text(storage.join(model_dir, REPORT_HTML), page)
    return text
