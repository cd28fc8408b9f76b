"""Names in the Markdown the steps write for the Kubeflow UI.

The shard summary, the dataset card, the training report and the run summary are Markdown
artifacts. The UI renders a Markdown artifact with markdown-to-jsx
(``frontend/src/components/viewers/MarkdownViewer.tsx``), which, unlike GitHub's renderer, reads
underscores inside a word as emphasis: the feature ``bill_length_mm`` showed as
bill<em>length</em>mm, and ``examples_per_second`` as examples<em>per</em>second. A name of a
column, feature, metric or field therefore goes into a code span, which every renderer shows as
written.
"""

from __future__ import annotations

import re


def code(name: object) -> str:
    """``name`` as a Markdown code span.

    CommonMark's rule: a fence one backtick longer than any run of backticks inside the name,
    padded with a space where the name starts or ends with one.

    Args:
        name: A name to show as written; anything but a str is shown as ``str(name)``.

    Returns:
        The code span.

    """
    text = str(name)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
