"""render/jsonable.dumps: orjson's speed with the stdlib encoder's text (ASCII only, the same values)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from vastprobe.model import Evidence, Unavailable
from vastprobe.render.jsonable import dumps


def stdlib(obj: object) -> str:
    from vastprobe.render.jsonable import _default

    return json.dumps(obj, default=_default, separators=(",", ":"))


def test_non_ascii_is_escaped_as_the_stdlib_does() -> None:
    # a CSI as a C1 control, a bidi override, an accent, an emoji past the BMP, ESC, rich markup
    obj = {"comm": "\u009b31m\u202eevil é 😀 \x1b[2J [bold]x[/bold] \x7f", "n": 1}
    assert dumps(obj) == stdlib(obj)
    assert dumps(obj).isascii() and "\x7f" not in dumps(obj)
    assert dumps({"del": "\x7f"}) == '{"del":"\\u007f"}'  # ASCII, but the stdlib escapes it: so do we


def test_dataclasses_unavailable_sets_and_int_keys_as_before() -> None:
    obj = {1: Evidence("kernel log", "line"), "u": Unavailable("Permission denied"), "s": frozenset({3, 1})}
    assert (
        dumps(obj)
        == stdlib(obj)
        == ('{"1":{"source":"kernel log","detail":"line"},"u":{"unavailable":"Permission denied"},"s":[1,3]}')
    )


def test_what_orjson_refuses_goes_through_the_stdlib() -> None:
    big = {"n": 2**70, "s": "\ud800"}  # past 64 bits; a lone surrogate
    assert dumps(big) == stdlib(big)


def test_a_non_finite_float_is_null_not_invalid_json() -> None:
    assert dumps([float("inf"), float("nan")]) == "[null,null]"  # the stdlib writes Infinity, NaN


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_same_values_as_the_stdlib_encoder(obj: object) -> None:
    text = dumps(obj)
    assert text.isascii()
    assert json.loads(text) == json.loads(stdlib(obj))


exact_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(exact_values)
def test_the_same_text_as_the_stdlib_encoder_without_floats(obj: object) -> None:
    assert dumps(obj) == stdlib(obj)
