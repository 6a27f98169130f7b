"""FunctionTool: schema from signature + docstring, validation, injection and a stable spec."""

from __future__ import annotations

import json
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.tools.base import Permission, Tool, ToolContext, ToolError
from bot.tools.function import FunctionTool, parse_docstring, tool

REPO = Path(__file__).resolve().parents[1]


def make_ctx(*roles: Role, channel: str = "c1") -> ToolContext:
    message = ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1", display_name="Ann", roles=frozenset(roles)),
        text="hi",
    )
    return ToolContext(message=message)


class Unit(Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Place(BaseModel):
    """A place on Earth."""

    city: str
    country: str = "FR"


async def weather(
    city: str,
    days: Annotated[int, Field(ge=1, le=7)] = 3,
    unit: Unit = Unit.CELSIUS,
    detail: Literal["short", "long"] = "short",
    title: str | None = None,
) -> str:
    """Get the weather forecast for a city.

    This second paragraph is not part of the description.

    Args:
        city: the city name,
            in English.
        days (int): how many days to forecast.
        unit: temperature unit.
        detail: how much to say.
        title: a heading for the answer.

    Returns:
        the forecast.
    """
    return f"{city}:{days}:{unit.value}:{detail}:{title}"


def test_schema_from_signature_and_google_docstring() -> None:
    spec = FunctionTool(weather).spec
    assert spec.name == "weather"
    assert spec.description == "Get the weather forecast for a city."
    assert spec.parameters == {
        "additionalProperties": False,
        "properties": {
            "city": {"description": "the city name, in English.", "type": "string"},
            "days": {
                "default": 3,
                "description": "how many days to forecast.",
                "maximum": 7,
                "minimum": 1,
                "type": "integer",
            },
            "unit": {
                "enum": ["celsius", "fahrenheit"],
                "type": "string",
                "description": "temperature unit.",
                "default": "celsius",
            },
            "detail": {
                "default": "short",
                "description": "how much to say.",
                "enum": ["short", "long"],
                "type": "string",
            },
            "title": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "description": "a heading for the answer.",
            },
        },
        "required": ["city"],
        "type": "object",
    }


def test_rest_docstring_nested_model_and_no_titles_anywhere() -> None:
    async def visit(place: Place, note: str = "") -> str:
        """Plan a visit.

        :param place: where to go
            (a city and a country).
        :param str note: anything to remember.
        :returns: a plan.
        """
        return place.city

    params = FunctionTool(visit).spec.parameters
    assert params["properties"]["place"]["description"] == "where to go (a city and a country)."
    assert params["properties"]["note"]["description"] == "anything to remember."
    assert params["properties"]["place"]["properties"]["city"] == {"type": "string"}
    assert "$defs" not in params and "$ref" not in json.dumps(params)
    assert '"title"' not in json.dumps(params)


def test_explicit_field_description_wins_over_docstring() -> None:
    async def f(x: Annotated[int, Field(description="from Field")]) -> str:
        """Do it.

        Args:
            x: from docstring.
        """
        return str(x)

    assert FunctionTool(f).spec.parameters["properties"]["x"]["description"] == "from Field"


def test_parse_docstring_first_paragraph_spans_lines() -> None:
    summary, params = parse_docstring("Line one\ncontinues.\n\nMore.\n\nArgs:\n    a: first\n")
    assert summary == "Line one continues."
    assert params == {"a": "first"}


def test_parse_docstring_reads_both_styles_and_whole_wrapped_descriptions() -> None:
    google = "Roll dice.\n\nArgs:\n    sides: how many sides.\n\n        Two at least.\n"
    assert parse_docstring(google) == ("Roll dice.", {"sides": "how many sides. Two at least."})
    both = "Roll.\n\nArgs:\n    sides: Google's.\n\n:param sides: reST's.\n:param count: dice.\n"
    assert parse_docstring(both) == ("Roll.", {"sides": "Google's.", "count": "dice."})
    assert parse_docstring("Roll.\n\nArgs:\n    sides without a colon\n") == ("Roll.", {})


async def test_context_is_injected_and_hidden_from_the_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    async def whoami(ctx: ToolContext, shout: bool = False) -> str:
        """Say who asked."""
        seen.append(ctx)
        name = ctx.message.author.display_name
        return name.upper() if shout else name

    assert isinstance(whoami, Tool)
    assert "ctx" not in whoami.spec.parameters["properties"]
    ctx = make_ctx()
    assert await whoami.call({"shout": True}, ctx) == "ANN"
    assert seen == [ctx]


async def test_arguments_are_validated_and_coerced() -> None:
    weather_tool = FunctionTool(weather)
    ctx = make_ctx()
    assert (
        await weather_tool.call({"city": "Oslo", "days": "2"}, ctx) == "Oslo:2:celsius:short:None"
    )
    with pytest.raises(ToolError) as info:
        await weather_tool.call({"days": 9, "unit": "kelvin", "extra": 1}, ctx)
    message = str(info.value)
    assert message.startswith("invalid arguments for weather: ")
    assert "city: Field required" in message
    assert "days: Input should be less than or equal to 7 (got 9)" in message
    assert "unit: Input should be 'celsius' or 'fahrenheit' (got 'kelvin')" in message
    assert "extra: Extra inputs are not permitted" in message


async def test_results_become_text() -> None:
    @tool
    async def as_dict() -> dict[str, object]:
        """A dict."""
        return {"a": 1, "b": [1, 2]}

    @tool
    async def as_model() -> Place:
        """A model."""
        return Place(city="Lyon")

    @tool
    async def as_none() -> None:
        """Nothing."""

    ctx = make_ctx()
    assert await as_dict.call({}, ctx) == '{"a":1,"b":[1,2]}'
    assert await as_model.call({}, ctx) == '{"city":"Lyon","country":"FR"}'
    assert await as_none.call({}, ctx) == "done"


def test_decorator_options() -> None:
    @tool(name="ban_user", permission=Permission.MODERATOR, timeout=3.5, description="Ban.")
    async def ban(user_id: str) -> str:
        """Ignored because description= is given."""
        return user_id

    assert ban.spec.name == "ban_user"
    assert ban.spec.description == "Ban."
    assert ban.permission is Permission.MODERATOR
    assert ban.timeout == 3.5


def test_sync_functions_and_varargs_are_rejected() -> None:
    def sync(x: int) -> str:
        return str(x)

    with pytest.raises(TypeError, match="must be an `async def` function"):
        FunctionTool(sync)  # type: ignore[arg-type]

    async def varargs(*names: str) -> str:
        return ""

    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        FunctionTool(varargs)


def _spec_bytes() -> str:
    return json.dumps(FunctionTool(weather).spec.model_dump(), sort_keys=False)


_SUBPROCESS = """
import json, sys
sys.path.insert(0, {tests!r})
from test_tools_function import weather
from bot.tools.function import FunctionTool
print(json.dumps(FunctionTool(weather).spec.model_dump(), sort_keys=False))
"""


@pytest.mark.e2e
def test_spec_is_byte_identical_across_builds_and_processes() -> None:
    first = _spec_bytes()
    assert first == _spec_bytes()
    script = _SUBPROCESS.format(tests=str(REPO / "tests"))
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {first}


async def test_parameter_names_that_shadow_basemodel_attributes() -> None:
    @tool
    async def validate(json: str, schema: str = "v1", copy: int = 1) -> str:
        """Check a document."""
        return f"{json}:{schema}:{copy}"

    assert list(validate.spec.parameters["properties"]) == ["json", "schema", "copy"]
    assert await validate.call({"json": "{}", "copy": 2}, make_ctx()) == "{}:v1:2"
    with pytest.raises(ToolError, match="json: Field required"):
        await validate.call({}, make_ctx())


def test_unresolvable_annotation_is_a_clear_type_error() -> None:
    class Local(BaseModel):
        x: int

    async def uses_local(value: Local) -> str:
        return ""

    with pytest.raises(TypeError, match="cannot resolve an annotation"):
        FunctionTool(uses_local)
