"""The Markdown dataset card shown for a version in the Kubeflow UI."""

from __future__ import annotations

from tfrecord_suite.markdown import code
from tfrecord_suite.registry.bumps import required_bump
from tfrecord_suite.registry.manifest import Manifest


def dataset_card(manifest: Manifest, parent: Manifest | None = None) -> str:
    """Splits, counts, schema, and the change from the parent version."""
    m = manifest
    totals = m.totals
    lines = [
        f"# {m.dataset} {m.version}",
        "",
        f"Created {m.created}; {totals['records']} records in {totals['shards']} "
        f"shards ({totals['bytes']} bytes){', GZIP' if m.gzip else ''}.",
        f"Content digest `{m.content_digest}`.",
        *_storage_lines(m),
        "",
        "| split | records | shards | bytes |",
        "|---|---:|---:|---:|",
    ]
    for name, s in m.splits.items():
        lines.append(f"| {name} | {s['records']} | {s['shards']} | {s['bytes']} |")
    schema = m.schema
    lines += ["", "## Schema", "", "| feature | dtype | shape | kind |", "|---|---|---|---|"]
    for f in schema["features"]:
        marker = " (label)" if f["name"] == schema.get("label") else ""
        lines.append(
            f"| {code(f['name'])}{marker} | {f['dtype']} | {f.get('shape', [])} | {f['kind']} |"
        )
    if schema.get("label_classes"):
        lines += ["", f"Classes: {', '.join(schema['label_classes'])}"]
    lines += ["", "## Lineage", ""]
    if m.append:
        a = m.append
        lines.append(
            f"Appended: {a['parent']} (content `{a['parent_content_digest'][:12]}`) plus "
            f"{a['added_records']} records in {a['added_shards']} shards "
            f"(staged content `{a['added_digest'][:12]}`)."
        )
    if parent is None:
        lines.append("First version.")
    else:
        kind, reasons = required_bump(parent, m)
        lines.append(f"Parent {parent.version}; bump `{m.bump}` (needed: {kind}).")
        lines += [f"- {r}" for r in m.bump_reasons or reasons]
    producer = m.producer
    lines += ["", "Producer: " + ", ".join(code(f"{k}={v}") for k, v in producer.items() if v)]
    return "\n".join(lines) + "\n"


def _storage_lines(m: Manifest) -> list[str]:
    """What the version costs: bytes it added and bytes it shares with its parent."""
    cost = m.storage
    if cost is None:  # written before versions shared data: every byte was its own copy
        return [f"Storage: {m.totals['bytes']} bytes added (a full copy), 0 shared."]
    return [
        f"Storage: {cost['added_bytes']} bytes added, {cost['shared_bytes']} bytes shared with "
        "the parent."
    ]
