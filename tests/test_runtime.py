"""The runtime layer: the public object's surface (signature, help, no partial internals), the
pure pipeline functions, the cache-entry codec, logging and progress of long compiles."""

from __future__ import annotations

import inspect
import logging
import pydoc

import numpy as np
import pytest

import tapejit as tj
from tapejit import pipeline, progress
from tapejit.frontend import tracing
from tapejit.codegen.cache import decode_entry, encode_entry, text
from tapejit.runtime.variant import compile_graph

RNG = np.random.default_rng(7)


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


@pytest.fixture(scope="module")
def g():
    return tj.compile(eam, RNG.random(10), cache=False)


def test_the_constructor_takes_only_public_parameters():
    params = inspect.signature(tj.GradientFunction).parameters
    assert list(params)[:3] == ["f", "example_args", "argnums"]
    assert not [p for p in params if p.startswith("_")]


def test_help_on_an_instance_shows_the_call_signature_and_doc(g):
    assert str(inspect.signature(g)) == "(*args, out=None)"
    page = pydoc.render_doc(g, renderer=pydoc.plaintext)
    assert "grad(*args, out=None)" in page and "value_and_grad" in page and "batch" in page
    assert "Call self as a function" not in page  # partial's __call__ doc
    call = page[page.index("__call__(") :]
    assert call.startswith("__call__(self, *args") and "gradient of ``f``" in call[:300]
    for name in ("compile", "grad", "value_and_grad"):
        doc = inspect.getdoc(getattr(tj, name))
        assert len(doc.split()) > 60 and "Raises" in doc, name


def test_calls_are_vectorcalls_and_match_the_python_method(g):
    from tapejit.codegen import fastcall

    if fastcall.layout_ok():
        assert tj.GradientFunction.__flags__ & (1 << 11)  # Py_TPFLAGS_HAVE_VECTORCALL
    x = RNG.random(10)
    np.testing.assert_array_equal(tj.GradientFunction.__call__(g, x), g(x))


def test_partials_attributes_describe_the_gradient(g):
    """Dask reads them of every functools.partial (tests/test_dask.py): partial(g.func,
    *g.args, **g.keywords) is the gradient; the C-level entry stays private."""
    x = RNG.random(10)
    assert g.args == () and g.keywords == {} and g.func.__name__ == "eam"
    np.testing.assert_array_equal(g.func(x), g(x))
    assert g.fn is eam and g.argnums == (0,) and g.name == "eam"


def test_the_pipeline_is_a_pure_function_of_the_trace():
    x = RNG.random(6)
    t = tracing.trace(eam, [x], (0,))
    a, b = pipeline.front(t, (0,)), pipeline.front(t, (0,))
    for stage in ("grad", "opt", "plan"):
        assert str(getattr(a, stage)) == str(getattr(b, stage))
    assert str(a.trace) == str(t) and a.timings.keys() == {"autodiff", "passes", "plan"}


def test_compile_graph_runs_a_hand_built_graph():
    t = tracing.trace(eam, [RNG.random(6)], (0,))
    v = compile_graph(t, tuple_result=False)
    x = RNG.random(6)
    value, grad = v.value_and_grad(x)
    assert value == pytest.approx(eam(x), rel=1e-13)
    np.testing.assert_allclose(grad, tj.compile(eam, x, cache=False)(x), rtol=1e-13)


def test_the_cache_entry_codec_round_trips_and_rejects_garbage():
    captured = {3: np.arange(4.0)}
    consts = [captured[3], np.linspace(0, 1, 5)]
    parts = encode_entry({"symbol": "s"}, b"\x7fELF", "ir", "ir-opt", consts, captured)
    e = decode_entry(parts, captured)
    assert e.meta == {"symbol": "s"} and e.object == b"\x7fELF"
    assert text(e.llvm) == "ir" and text(e.llvm_opt) == "ir-opt"
    assert e.consts[0] is not None and "const0" not in parts  # a captured array: by reference
    np.testing.assert_array_equal(e.consts[1], consts[1])
    assert decode_entry(None, captured) is None
    assert decode_entry({**parts, "meta": b"{not json"}, captured) is None
    assert decode_entry({k: v for k, v in parts.items() if k != "object"}, captured) is None
    assert decode_entry(parts, {}) is None  # the captured array it refers to is missing


def test_compiles_log_their_stages(caplog):
    with caplog.at_level(logging.DEBUG, logger="tapejit"):
        tj.compile(eam, RNG.random(7), cache=False)
    text_ = caplog.text
    for stage in ("trace", "autodiff", "passes", "plan", "lower", "llvm"):
        assert f"{stage} took" in text_, stage
    info = [r for r in caplog.records if r.levelno == logging.INFO]
    assert info and "compiled eam in" in info[-1].getMessage()


def test_progress_shows_on_long_compiles_only_when_wanted(monkeypatch, capsys):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    tj.compile(eam, RNG.random(9), cache=False, progress=True)
    err = capsys.readouterr().err
    assert "tapejit" in err and "eam" in err
    tj.compile(eam, RNG.random(11), cache=False, progress=False)
    assert capsys.readouterr().err == ""
    tj.compile(eam, RNG.random(12), cache=False)  # not a terminal here: off by default
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TAPEJIT_PROGRESS", "0")
    assert progress.wanted(None) is False and progress.wanted(True) is True
    with pytest.raises(TypeError, match="progress"):
        tj.compile(eam, RNG.random(9), progress="yes")
