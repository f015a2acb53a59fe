"""The spec-file loader shared by inventories and campaigns: bounded YAML with line marks.

Both kinds of file go through :func:`load_spec` (or :func:`parse_spec` for text), which

* reads at most :data:`MAX_BYTES` of a regular file (a FIFO or ``/dev/zero`` is refused, not read);
* refuses nesting deeper than :data:`MAX_DEPTH` from the event stream, then composes the YAML
  once and checks the node tree before anything is built from it: an alias inside its own anchor (recursion), more
  than :data:`MAX_NODES` values once aliases are expanded (a "billion laughs" bomb), and a
  key given twice in one mapping (the error names both lines) are all refused;
* validates the data with a strict pydantic model (:class:`SpecModel`: unknown keys are
  errors, NaN and infinities are refused, values are frozen) and turns every problem into
  one error naming the file, the line, the field and the allowed keys.

Errors are raised as the caller's class (InventoryError, CampaignError), never a traceback.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pydantic
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Strict

from ncclbot_sweep.errors import NcclbotError

__all__ = ["BYTES_MAX", "INT_MAX", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "Bool", "Bytes", "Float", "Int", "SpecModel",
           "error_message", "load_spec", "parse_spec", "validation_problem"]

#: The largest spec file read (a campaign or inventory is a few kilobytes).
MAX_BYTES = 1 << 20
#: The deepest nesting of mappings and lists accepted.
MAX_DEPTH = 40
#: The most YAML values accepted once aliases are expanded.
MAX_NODES = 200_000

M = TypeVar("M", bound=BaseModel)
# libyaml's parser is ten times faster, which keeps refusing a hostile file fast.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


#: The largest integer a spec value (or a ``step.json`` field) may hold: counts are int32 in the
#: dataset and the manifest, and a number beyond that is a typo, not a machine.
INT_MAX = 2**31 - 1


#: The largest size in bytes (int64, the dataset's size columns).
BYTES_MAX = 2**63 - 1


def _within(low: int, high: int) -> AfterValidator:
    # A validator, not ge/le: pydantic keeps one bound of each kind, so the type's would replace a field's.
    def check(value: int) -> int:
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range ({low} to {high})")
        return value

    return AfterValidator(check)


#: The number types of every model field. Strict: an integer is an integer, never a bool
#: (``nodes: [true]`` is not 1 node), a float (``1.0e+20``) or text; a float may be given as an
#: integer; a bool is ``true``/``false``, never 1 or "yes". Lax pydantic types accept all of these.
Int = Annotated[int, Strict(), _within(-INT_MAX - 1, INT_MAX)]
#: A size in bytes: an integer from 0 to :data:`BYTES_MAX`.
Bytes = Annotated[int, Strict(), _within(0, BYTES_MAX)]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]


class SpecModel(BaseModel):
    """Base of every inventory and campaign model: unknown keys and non-finite numbers are errors,
    values are immutable once loaded. Number fields use :data:`Int`, :data:`Float` and :data:`Bool`
    (``tests/orchestration/test_orch_specfile.py`` holds every model to it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --------------------------------------------------------------------------- reading and YAML


def _read(path: Path, error_cls: type[NcclbotError]) -> str:
    """The text of a regular file of at most MAX_BYTES; raises ``error_cls`` naming the path."""
    try:
        if not path.exists():
            raise error_cls("file not found", path=path, hint="check the path")
        if not path.is_file():
            raise error_cls("not a regular file", path=path, hint="give the path of a YAML file")
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise error_cls(f"cannot read the file: {exc.strerror or exc}", path=path,
                        hint="check the file's permissions") from exc
    if len(data) > MAX_BYTES:
        raise error_cls(f"the file is larger than {MAX_BYTES >> 10} KiB; a spec file is a few KiB",
                        path=path, hint="check that this is the right file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error_cls("the file is not UTF-8 text", path=path, line=line,
                        hint="save it as UTF-8") from exc


def _compose(text: str, path: str | Path, error_cls: type[NcclbotError]) -> tuple[Any, yaml.Node | None]:
    """(data, node tree) of YAML text, checked by :func:`_check_tree` before it is constructed."""
    loader = _Loader(text)
    try:
        _check_depth(text, path, error_cls)
        node = loader.get_single_node()
        if node is not None:
            _check_tree(node, path, error_cls)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise error_cls(f"invalid YAML: {problem}", path=path, line=line,
                        hint="check indentation and quoting on that line") from exc
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise error_cls("the file must hold a mapping of keys to values", path=path, line=1)
    return data, node


def _check_depth(text: str, path: str | Path, error_cls: type[NcclbotError]) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the event stream, before the (recursive) composer runs."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise error_cls(f"the YAML is nested too deeply (more than {MAX_DEPTH} levels)", path=path,
                                line=event.start_mark.line + 1, hint="a spec file needs a few levels; check the file")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_tree(root: yaml.Node, path: str | Path, error_cls: type[NcclbotError]) -> None:
    """Refuse self-referencing aliases, alias bombs and duplicate keys (see the module docstring)."""
    seen = 0

    def fail(node: yaml.Node, message: str, hint: str) -> None:
        raise error_cls(message, path=path, line=node.start_mark.line + 1, hint=hint)

    def walk(node: yaml.Node, depth: int, ancestors: set[int]) -> None:
        nonlocal seen
        seen += 1
        if seen > MAX_NODES:
            fail(node, f"the YAML expands to more than {MAX_NODES} values (aliases of aliases?)",
                 "write the values out, or use fewer nested aliases")
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return
        if depth >= MAX_DEPTH:  # aliases nest what they name: the expanded depth counts too
            fail(node, f"the YAML is nested too deeply once aliases are expanded (more than {MAX_DEPTH} levels)",
                 "use fewer aliases inside aliases")
        if id(node) in ancestors:
            fail(node, "an alias refers to the mapping or list that holds it (the YAML is recursive)",
                 "remove the alias (*name) that points back at its own anchor (&name)")
        if isinstance(node, yaml.MappingNode):
            _check_duplicates(node, fail)
            children = [child for pair in node.value for child in pair]
        else:
            children = list(node.value)
        ancestors.add(id(node))
        for child in children:
            walk(child, depth + 1, ancestors)
        ancestors.discard(id(node))

    walk(root, 0, set())


def _check_duplicates(node: yaml.MappingNode, fail: Any) -> None:
    first: dict[str, yaml.Node] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        if key.value in first:
            fail(key, f"key {key.value!r} is given twice: on line {first[key.value].start_mark.line + 1} "
                      f"and on line {key.start_mark.line + 1}", "keep one of the two")
        first[key.value] = key


# --------------------------------------------------------------------------- validation messages


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """The line of the deepest YAML node along ``loc`` (pydantic error locations)."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if k.value == part), None)
            if found is None:
                continue  # a union tag or a missing key: stay at the parent
            key_node, node = found
            line = (node if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode))
                    else key_node).start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
    return line


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types inside Optional/Union/list/dict annotations."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _unwrap(arg)]
    return [annotation]


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The pydantic model class that owns the mapping at ``loc`` (to list its valid keys)."""
    current: Any = model
    for part in loc:
        models = [t for t in _unwrap(current) if isinstance(t, type) and issubclass(t, BaseModel)]
        containers = [t for t in _unwrap(current) if typing.get_origin(t) in (list, dict)]
        if models and isinstance(part, str) and part in models[0].model_fields:
            current = models[0].model_fields[part].annotation
        elif containers:
            current = typing.get_args(containers[0])[-1]
        # anything else is a union tag in the location: stay where we are
    models = [t for t in _unwrap(current) if isinstance(t, type) and issubclass(t, BaseModel)]
    return models[0] if models else None


#: What a value of each strict type must be, for pydantic's type errors.
_TYPE_WORDS = {"int_type": "a whole number (true, 2.0 and \"2\" are not)", "float_type": "a number",
               "bool_type": "true or false", "string_type": "text", "dict_type": "a mapping of names to values",
               "list_type": "a list"}
#: How pydantic's bound errors read: (words, the bound's key in the error's context).
_BOUND_WORDS = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
                "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}


def _spelled(value: Any) -> str:
    """A value as YAML spells it (``true``, ``2.0``, ``"2"``), short."""
    try:
        return json.dumps(value)[:60]
    except (TypeError, ValueError):
        return repr(value)[:60]


def error_message(err: Mapping[str, Any]) -> str:
    """What one pydantic error (an item of ``ValidationError.errors()``) says, in our words."""
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "finite_number":
        return "must be a finite number (not .inf or .nan)"
    if err["type"] in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[err['type']]}, not {_spelled(err.get('input'))}"
    if err["type"] in _BOUND_WORDS:
        words, key = _BOUND_WORDS[err["type"]]
        return f"must be {words} {err.get('ctx', {}).get(key)}, not {_spelled(err.get('input'))}"
    return str(err["msg"]).removeprefix("Value error, ")


def validation_problem(exc: pydantic.ValidationError, node: yaml.Node | None,
                       model: type[BaseModel]) -> tuple[str, int | None]:
    """Turn a pydantic error into (message listing every problem with field and line, first line)."""
    lines: list[tuple[int | None, str]] = []
    first_line: int | None = None
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(node, loc)
        if first_line is None:
            first_line = line
        if err["type"] == "extra_forbidden":
            owner = _model_at(model, loc[:-1])
            allowed = ", ".join(owner.model_fields) if owner else "see the documentation"
            message = f"unknown key; allowed keys here: {allowed}"
        else:
            message = error_message(err)
        lines.append((line, f"{field}: {message}"))
    if len(lines) == 1:
        return lines[0][1], first_line
    return "".join(f"\n    line {ln}: {text}" if ln else f"\n    {text}" for ln, text in lines), first_line


# --------------------------------------------------------------------------- entry points


def parse_spec(text: str, path: str | Path, model: type[M], error_cls: type[NcclbotError], *,
               what: str, hint: str) -> M:
    """Validate spec YAML ``text`` as ``model``; raises ``error_cls`` with file, line and field.

    ``what`` names the kind of file in messages ("inventory"), ``hint`` says how to re-check it.
    """
    if len(text) > MAX_BYTES:
        raise error_cls(f"the text is larger than {MAX_BYTES >> 10} KiB; a spec file is a few KiB", path=path)
    data, node = _compose(text, path, error_cls)
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        message, line = validation_problem(exc, node, model)
        raise error_cls(f"invalid {what}: {message}", path=path, line=line, hint=hint) from exc


def load_spec(path: Path, model: type[M], error_cls: type[NcclbotError], *, what: str, hint: str) -> M:
    """Read (bounded) and validate a spec file; see :func:`parse_spec`."""
    return parse_spec(_read(path, error_cls), path, model, error_cls, what=what, hint=hint)
