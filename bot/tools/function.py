"""Tools from typed async Python functions: the signature and docstring become the JSON schema.

A tool's spec is sent with every model request, inside the cached prompt prefix, so the schema
has to be byte-stable: it is generated once from the signature (pydantic, parameter order kept),
pydantic's ``title`` noise is stripped and ``$defs`` references are inlined (simpler for every
vendor). The model's arguments are validated by the same pydantic model before the function
runs; a validation error becomes a ``ToolError`` with a readable message so the model can fix
its arguments and try again.

A parameter annotated ``ToolContext`` is injected by type (never by name) and is not shown to
the model. Only ``async def`` functions are accepted: the bot is asyncio throughout and a sync
function would block the event loop.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, overload

import docstring_parser
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from bot.llm.types import ToolSpec
from bot.tools.base import Permission, ToolContext, ToolError

AsyncToolFunction = Callable[..., Awaitable[Any]]

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# reST first, so Google's description and entries win where both styles read something.
_STYLES = (docstring_parser.DocstringStyle.REST, docstring_parser.DocstringStyle.GOOGLE)
# Keys whose values are data, not sub-schemas: never strip a "title" inside them.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples", "example"})
# Keys whose values map *names* to sub-schemas: a property may itself be called "title".
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions"})


class FunctionTool:
    """A ``Tool`` backed by an ``async def`` function."""

    def __init__(
        self,
        func: AsyncToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: Permission = Permission.EVERYONE,
        timeout: float = 10.0,
    ) -> None:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(
                f"tool {getattr(func, '__qualname__', func)!r} must be an `async def` function "
                "(Chorus runs on asyncio; a sync function would block the event loop)"
            )
        if timeout <= 0:
            raise ValueError(f"tool timeout must be positive, got {timeout}")
        self.func = func
        self.permission = permission
        self.timeout = timeout
        tool_name = name or func.__name__
        summary, param_docs = parse_docstring(inspect.getdoc(func) or "")
        self._model, self._context_params = _arguments_model(func, tool_name, param_docs)
        self.spec = ToolSpec(
            name=tool_name,
            description=description if description is not None else summary,
            parameters=clean_schema(self._model.model_json_schema()),
        )

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"FunctionTool({self.spec.name!r}, permission={self.permission.value})"

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        try:
            validated = self._model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(format_validation_error(self.spec.name, exc)) from None
        kwargs = {
            field.removeprefix("arg_"): getattr(validated, field)
            for field in type(validated).model_fields
        }
        kwargs.update(dict.fromkeys(self._context_params, ctx))
        return result_text(await self.func(**kwargs))


@overload
def tool(func: AsyncToolFunction, /) -> FunctionTool: ...


@overload
def tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission = Permission.EVERYONE,
    timeout: float = 10.0,
) -> Callable[[AsyncToolFunction], FunctionTool]: ...


def tool(
    func: AsyncToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission = Permission.EVERYONE,
    timeout: float = 10.0,
) -> FunctionTool | Callable[[AsyncToolFunction], FunctionTool]:
    """Turn an ``async def`` into a ``FunctionTool``; usable as ``@tool`` or ``@tool(...)``."""

    def wrap(f: AsyncToolFunction) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, permission=permission, timeout=timeout
        )

    return wrap(func) if func is not None else wrap


# -- schema ----------------------------------------------------------------------------------
def _arguments_model(
    func: AsyncToolFunction, tool_name: str, param_docs: dict[str, str]
) -> tuple[type[BaseModel], tuple[str, ...]]:
    """A pydantic model of the model-visible parameters, and the names of injected ones."""
    try:
        signature = inspect.signature(func, eval_str=True)
    except NameError as exc:  # a string annotation naming a type local to some function
        raise TypeError(
            f"tool {tool_name!r}: cannot resolve an annotation ({exc}); define the types it "
            "uses at module level"
        ) from None
    fields: dict[str, Any] = {}
    context_params: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args/**kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"tool {tool_name!r}: positional-only parameters are not supported")
        annotation = Any if param.annotation is param.empty else param.annotation
        if annotation is ToolContext:
            context_params.append(param.name)
            continue
        default = ... if param.default is param.empty else param.default
        # An explicit Field(description=...) wins over the docstring.
        explicit = FieldInfo.from_annotated_attribute(annotation, default).description
        if explicit is None and param.name in param_docs:
            annotation = Annotated[annotation, Field(description=param_docs[param.name])]
        # Fields get neutral internal names and the parameter's name as alias, so a parameter
        # may be called ``json``, ``schema`` or ``copy`` without shadowing BaseModel methods.
        fields[f"arg_{param.name}"] = (Annotated[annotation, Field(alias=param.name)], default)
    model = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    return model, tuple(context_params)


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$defs`` (unless recursive) and drop pydantic's generated ``title`` keys."""
    defs = schema.get("$defs", {})
    inlined = _inline_refs(schema, defs, ())
    if _has_ref(inlined):  # recursive types: keep the definitions the references need
        inlined = {**inlined, "$defs": defs}
    else:
        inlined.pop("$defs", None)
    result = _strip_titles(inlined)
    assert isinstance(result, dict)
    return result


def _inline_refs(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        key = ref.removeprefix("#/$defs/")
        if key in defs and key not in seen:
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            target = _inline_refs(defs[key], defs, (*seen, key))
            return {**target, **_inline_refs(siblings, defs, seen)}
        return node
    return {
        k: (v if k in _DATA_KEYS else _inline_refs(v, defs, seen))
        for k, v in node.items()
        if k != "$defs"
    }


def _has_ref(node: Any) -> bool:
    if isinstance(node, list):
        return any(_has_ref(item) for item in node)
    if isinstance(node, dict):
        return "$ref" in node or any(_has_ref(v) for k, v in node.items() if k not in _DATA_KEYS)
    return False


def _strip_titles(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_titles(value)
    return out


# -- docstrings ------------------------------------------------------------------------------
def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (the tool's description) and per-parameter descriptions.

    Read by ``docstring_parser`` in Google style (an ``Args:`` section of ``name (type): text``
    entries) and in reST (``:param name: text``), each parser run on its own and Google's text
    taken where both name a parameter (letting the library guess the style would run its four
    parsers on every tool's docstring at start-up). Lines are joined with single spaces, so a
    description wrapped in the source reads as one line to the model.
    """
    summary, params = "", {}
    for style in _STYLES:
        try:
            parsed = docstring_parser.parse(doc, style)
        except docstring_parser.ParseError:  # not this style (a malformed Args: section)
            continue
        summary = _PARAGRAPH_BREAK.split(parsed.description or "", maxsplit=1)[0]
        params.update({p.arg_name: _joined(p.description) for p in parsed.params if p.description})
    return _joined(summary), params


def _joined(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


# -- calls -----------------------------------------------------------------------------------
def format_validation_error(tool_name: str, exc: ValidationError) -> str:
    """One readable line per problem: ``where: what (got <input>)``."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problem = f"{where}: {error['msg']}"
        if error["type"] not in ("missing", "extra_forbidden") and "input" in error:
            shown = repr(error["input"])
            problem += f" (got {shown[:80] + '...' if len(shown) > 80 else shown})"
        problems.append(problem)
    return f"invalid arguments for {tool_name}: " + "; ".join(problems)


def result_text(value: Any) -> str:
    """A tool's return value as text: ``str`` as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return "done"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return pydantic_core.to_json(value).decode()
