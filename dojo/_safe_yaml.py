"""The YAML half of dojo.safe_load: a yaml.SafeLoader that counts nesting while composing,
measures what aliases expand to before anything is constructed, and refuses duplicate keys and
non-finite floats. Imported only when a YAML file is read (yaml is a lazy import)."""

import math
import sys
from typing import Any

from dojo.safe_load import LoadError, clip, shorten


def load(
    text: str, *, what: str, finite: bool, max_depth: int, max_nodes: int, max_alias_chars: int
) -> Any:
    import yaml

    try:
        loader = _safe_loader(max_depth, finite)(text)  # the reader refuses \x00 etc. here
    except yaml.YAMLError as e:
        raise _yaml_syntax(what, e) from None
    try:
        node = loader.get_single_node()
        if node is None:  # empty document
            return None
        _measure(node, max_depth=max_depth, max_nodes=max_nodes, max_chars=max_alias_chars)
        return loader.construct_document(node)
    except _YamlLimit as e:
        raise LoadError(
            f"{what}: {e.args[0]} (line {e.line})", hint=e.hint, reason=e.reason, line=e.line
        ) from None
    except ValueError as e:
        if "integer string conversion" in str(e):  # yaml's int() past Python's 4,300 digits
            raise LoadError(
                f"{what} holds an integer of more than {sys.get_int_max_str_digits():,} digits",
                hint="no setting is a number that long: check the value",
                reason="number",
            ) from None
        raise _yaml_syntax(what, e) from None
    except (yaml.YAMLError, RecursionError) as e:
        raise _yaml_syntax(what, e) from None
    finally:
        loader.dispose()


def _yaml_syntax(what: str, e: BaseException) -> LoadError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    where = f" (line {line}, column {col})" if mark is not None else ""
    parts = [getattr(e, "context", None), getattr(e, "problem", None)]
    detail = "; ".join(str(p) for p in parts if p) or str(e)
    return LoadError(
        f"{what}: malformed YAML{where}: {clip(detail, 100)}",
        hint="fix the YAML syntax (key: value, one per line)",
        reason="syntax",
        detail=detail,
        line=line,
        column=col,
    )


class _YamlLimit(Exception):
    def __init__(self, message: str, mark: Any, reason: str, hint: str) -> None:
        super().__init__(message)
        self.line = mark.line + 1 if mark is not None else 0
        self.reason = reason
        self.hint = hint


def _safe_loader(max_depth: int, finite: bool) -> Any:
    """A yaml.SafeLoader subclass that counts nesting while composing and refuses duplicate
    keys and non-finite floats while constructing."""
    import yaml

    class Loader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            # Checked before recursing: the composer recurses once per level.
            self._depth += 1
            try:
                if self._depth > max_depth:
                    raise _YamlLimit(
                        f"nests deeper than {max_depth} levels",
                        self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                        "depth",
                        "real configs nest a few levels; this looks generated or hostile",
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: list[Any] = []
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *base` then overriding a key is the point of merges
                    key = self.construct_object(key_node, deep=True)
                    try:
                        dup = key in seen
                    except TypeError:  # unhashable key: the base class reports it
                        dup = False
                    if dup:
                        raise _YamlLimit(
                            f"has the key {shorten(key)} twice in one mapping",
                            key_node.start_mark,
                            "duplicate",
                            "keep one; YAML readers silently use the last and drop the other",
                        )
                    seen.append(key)
            return super().construct_mapping(node, deep)

        def construct_yaml_float(self, node: Any) -> float:
            value: float = super().construct_yaml_float(node)
            if finite and not math.isfinite(value):
                raise _YamlLimit(
                    f"holds the non-finite number {shorten(node.value)}",
                    node.start_mark,
                    "nonfinite",
                    "use a finite number; .nan, .inf and values past 1.8e308 are not sizes",
                )
            return value

    Loader.add_constructor("tag:yaml.org,2002:float", Loader.construct_yaml_float)
    return Loader


def _measure(root: Any, *, max_depth: int, max_nodes: int, max_chars: int) -> None:
    """Refuse a node graph that expands past the budgets once aliases are followed, or that
    refers to itself. Iterative, memoised per node: a billion laughs costs ~30 steps here."""
    import yaml

    memo: dict[int, tuple[int, int, int]] = {}  # id -> (nodes, scalar chars, depth) expanded
    visiting: set[int] = set()  # the nodes on the current path (ancestors)
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.ScalarNode):
            kids: list[Any] = []
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        else:
            kids = list(node.value)
        if not done:
            if key in memo:
                continue
            if key in visiting:
                raise _YamlLimit(
                    "refers to itself through an alias",
                    node.start_mark,
                    "aliases",
                    "a config cannot contain itself; remove the alias",
                )
            visiting.add(key)
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        visiting.discard(key)
        if isinstance(node, yaml.ScalarNode):
            memo[key] = (1, len(node.value), 0)
        else:
            stats = [memo[id(k)] for k in kids]
            memo[key] = (
                1 + sum(s[0] for s in stats),
                sum(s[1] for s in stats),
                1 + max((s[2] for s in stats), default=0),
            )
        nodes, chars, depth = memo[key]
        if nodes > max_nodes or chars > max_chars:
            raise _YamlLimit(
                f"expands to more than {max_nodes:,} nodes or {max_chars:,} characters "
                "through its aliases (a YAML bomb?)",
                node.start_mark,
                "aliases",
                "write the values out; a config needs no aliases that multiply",
            )
        if depth > max_depth:
            raise _YamlLimit(
                f"nests deeper than {max_depth} levels through its aliases",
                node.start_mark,
                "depth",
                "real configs nest a few levels; this looks generated or hostile",
            )
