"""bench --tune: one instance row of instances.yaml with some integer keys set, everything else kept
byte for byte (the arch records, the other rows, comments, alignment). Needs pyyaml: imported here
only when called, so the runtime never loads it otherwise."""

from __future__ import annotations


class RowError(ValueError):
    """The table has no such row, or it is not a mapping this edit can change."""


def _scalar(node, key: str):
    import yaml

    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.ScalarNode):
            return v.value
    return None


def _row(text: str, arch: str, name: str):
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise RowError("expected a mapping with an `instances:` list at the top level")
    instances = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "instances"), None)
    if not isinstance(instances, yaml.SequenceNode):
        raise RowError("expected an `instances:` list at the top level")
    rows = [
        n
        for n in instances.value
        if isinstance(n, yaml.MappingNode) and _scalar(n, "arch") == arch and _scalar(n, "name") == name
    ]
    if len(rows) != 1:
        raise RowError(f"expected one instance row with arch {arch!r} and name {name!r}, found {len(rows)}")
    return rows[0]


def set_instance_keys(text: str, arch: str, name: str, values: dict[str, int]) -> str:
    """`text` with the row {arch: `arch`, name: `name`, ...} holding `values`: a key the row has gets
    its value replaced in place, a key it lacks is appended (`, key: v` before a flow mapping's `}`,
    or a line `key: v` under a block mapping). The result is not validated: load it with the loader."""
    import yaml

    node = _row(text, arch, name)
    present = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
    edits = []  # (start, end, replacement) in character offsets of `text`
    for key, value in values.items():
        if key in present:
            v = present[key]
            if not isinstance(v, yaml.ScalarNode):
                raise RowError(f"{arch} {name}: {key} is not a scalar")
            edits.append((v.start_mark.index, v.end_mark.index, str(int(value))))
    new = [f"{key}: {int(value)}" for key, value in values.items() if key not in present]
    if new:
        end = node.value[-1][1].end_mark.index  # after the row's last value (rows have arch and name)
        if node.flow_style:
            edits.append((end, end, ", " + ", ".join(new)))
        else:
            indent = " " * node.value[0][0].start_mark.column
            edits.append((end, end, "".join(f"\n{indent}{item}" for item in new)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def row_line(text: str, arch: str, name: str) -> str:
    """The source text of that row (its first line through its last), for printing."""
    node = _row(text, arch, name)
    # A flow mapping ends after its `}`; a block mapping's own end is the next row's start.
    last = node.end_mark.line if node.flow_style else node.value[-1][1].end_mark.line
    return "\n".join(text.splitlines()[node.start_mark.line : last + 1]).strip()
