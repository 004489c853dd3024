"""The compiled sample reader: its tables hold what a dict holds, it counts and ranks the names of a request
exactly as the Python path reads them, and anything that is not a plain names array is left to the whole parse."""

from __future__ import annotations

import json
import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import ExtenderRequestError
from agent.extender import sample
from agent.extender.rankwalk import listed
from agent.extender.sample import asked_names
from agent.extender.scoretable import RANK_SCALE
from agent.extender.wire import encode_priorities, parse_extender_args
from tests.unit.extender.factories import request_names


def test_the_package_is_built_with_the_compiled_reader() -> None:
    """Where the tests run (scripts/setup installs a compiler and Python's headers), the reader is built: a failed
    build would otherwise leave every request on the slower Python path unnoticed."""
    from agent.extender import _sample

    assert _sample.MAX_LIMIT == sample.MAX_LIMIT >= 16


@pytest.mark.parametrize("seed", range(8))
def test_a_rank_table_holds_what_a_dict_holds_through_puts_drops_and_growth(seed: int) -> None:
    rng = random.Random(seed)
    table, model = sample.RankTable(), {}
    pool = [f"node-{i}" for i in range(3000)] + ["", "a", "x" * 300, "é-node"]
    for _ in range(20000):
        name = rng.choice(pool)
        if rng.random() < 0.6:
            rank = rng.randrange(-(2**31), 2**31)
            table.put(name, rank)
            model[name] = rank
        else:
            table.drop(name)
            model.pop(name, None)
    assert len(table) == len(model)
    assert all(table.get(name) == model.get(name) for name in pool)


@pytest.mark.parametrize("seed", range(4))
def test_a_small_table_probed_through_its_filter_finds_what_it_holds_after_drops(seed: int) -> None:
    """The holders and promised nodes are told apart by a filter of bits first; names dropped and put again many
    times (the filter made anew as they go) are found exactly as held."""
    rng = random.Random(seed)
    pool = [f"node-{i}" for i in range(400)]
    base, small, held = sample.RankTable(), sample.RankTable(), {}
    for name in pool:
        base.put(name, 1)
    for round_ in range(30):
        for _ in range(200):
            name = rng.choice(pool)
            if rng.random() < 0.5:
                small.put(name, 2)
                held[name] = 2
            else:
                small.drop(name)
                held.pop(name, None)
        names = rng.sample(pool, 300)
        found = request_names(names)
        assert sample.best_of(found.body, found.start, base, small, None, sample.MAX_LIMIT) == model_best(
            names, dict.fromkeys(pool, 1), held, set(), sample.MAX_LIMIT
        ), f"round {round_}"
        skip = set(rng.sample(sorted(held), len(held) // 2)) if held else set()
        skip_table = sample.RankTable()
        for name in skip:
            skip_table.put(name, 0)
        assert sample.best_of(found.body, found.start, base, small, skip_table, sample.MAX_LIMIT) == model_best(
            names, dict.fromkeys(pool, 1), held, skip, sample.MAX_LIMIT
        )


def test_a_rank_table_refuses_what_is_not_a_name_and_a_rank() -> None:
    table = sample.RankTable()
    with pytest.raises(TypeError):
        table.put(b"node", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        table.drop(1)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        table.put("node", 2**40)
    assert len(table) == 0


@pytest.mark.parametrize(
    "names", [[], ["a"], ["node-1", "node-2"], ["x" * 500], ["with space", "comma,inside", "colon:]"]], ids=repr
)
def test_plain_names_are_counted_and_read_as_the_whole_parse_reads_them(names: list[str]) -> None:
    found = request_names(names)
    assert len(found) == len(names)
    assert list(found) == names
    assert found == names
    assert found[0:1] == names[0:1]


@pytest.mark.parametrize(
    "body",
    [
        b'{"Pod":{},"Nodes":null,"NodeNames":["a\\"b"]}',  # an escape
        b'{"Pod":{},"Nodes":null,"NodeNames":["a\\u0041"]}',
        '{"Pod":{},"Nodes":null,"NodeNames":["é"]}'.encode(),  # not ASCII
        b'{"Pod":{},"Nodes":null,"NodeNames":["a\tb"]}',  # a control character
        b'{"Pod":{},"Nodes":null,"NodeNames":["a"] }',  # not the last bytes
        b'{"Pod":{},"Nodes":null,"NodeNames":["a"]}\n',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a",]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a" ,"b"]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a"]]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":[1]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a"}',
        b'{"Pod":{},"Nodes":null,"NodeNames":[',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a]}',
        b'{"Pod":{"x":{"y":1,"NodeNames":["a"]}}}',  # nested: not the body's last member
        b'{"Pod":{},"Nodes":null,"NodeNames": ["a"]}',  # spaced: the whole parse reads it
    ],
)
def test_anything_but_a_plain_last_names_array_is_left_to_the_whole_parse(body: bytes) -> None:
    assert asked_names(body) is None


def reads(body: bytes, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    """What parse_extender_args makes of the body, by the compiled split or by the whole parse."""
    monkeypatch.setattr(sample, "COMPILED", compiled)
    try:
        request = parse_extender_args(body)
    except ExtenderRequestError as exc:
        return ("error", str(exc))
    names = None if request.node_names is None else list(request.node_names)
    return (request.demand, names, request.nodes, request.dra)


PODS = [
    {"metadata": {"name": "p", "annotations": {"example.com/fpga-bitstream": "aes"}}, "spec": {"containers": []}},
    {
        "metadata": {"name": "q", "namespace": "ml", "annotations": {"example.com/fpga-bitstream": "fft"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga-slot": "2"}}}]},
    },
    {"metadata": {"annotations": {"x": ',"NodeNames":["trap"]}'}}, "spec": {}},  # the member's text in a string
    {"metadata": {"annotations": {"x": 5}}},  # a bad pod: the same error either way
    {"spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}},
    None,
    [],
]


@pytest.mark.parametrize("pod", PODS, ids=range(len(PODS)))
@pytest.mark.parametrize(
    "shape",
    [
        '{{"Pod":{pod},"Nodes":null,"NodeNames":{names}}}',
        '{{"Pod":{pod},"NodeNames":{names}}}',
        '{{"NodeNames":{names}}}',
        '{{"Pod":{pod},"NodeNames":["first"],"NodeNames":{names}}}',  # a key twice: the last one holds
        '{{"Pod":{pod},"nodenames":["other"],"NodeNames":{names}}}',
        '{{"Pod":{pod},"Nodes":{{"items":[]}},"NodeNames":{names}}}',
        '{{"Pod":{pod},"Nodes":null,"NodeNames":{names},}}',
        '{{"Pod":{pod},,"NodeNames":{names}}}',
        '{{"Pod":{pod}"NodeNames":{names}}}',
        '{{"Pod":{pod},"Nodes":"x,"NodeNames":{names}}}',
        '[{{"Pod":{pod},"NodeNames":{names}}}]',
    ],
)
@pytest.mark.parametrize("names", [["a", "b"], [], ["n-1"] * 3])
def test_the_split_read_equals_the_whole_parse_errors_included(
    pod: object, shape: str, names: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = shape.format(pod=json.dumps(pod, separators=(",", ":")), names=json.dumps(names, separators=(",", ":")))
    assert reads(body.encode(), True, monkeypatch) == reads(body.encode(), False, monkeypatch)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.text(alphabet=',:"[]{}\\ abNodesPd0', max_size=30),
    names=st.lists(st.text(alphabet='ab-."\\,]é', max_size=4), max_size=4),
)
def test_garbled_bodies_read_alike_both_ways(prefix: str, names: list[str]) -> None:
    body = ('{"Pod":{}' + prefix + ',"NodeNames":' + json.dumps(names, separators=(",", ":")) + "}").encode()
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert reads(body, True, monkeypatch) == reads(body, False, monkeypatch)


def model_best(
    names: list[str], base: dict[str, int], lifted: dict[str, int], skip: set[str], limit: int
) -> tuple[int | None, list[tuple[str, int]]]:
    """best_of by its definition: each name once, ranked by lifted (unless skipped) else base, unknown left out."""
    ranked: list[tuple[str, int]] = []
    seen: set[str] = set()
    for name in names:
        if name not in base or name in seen:
            continue
        seen.add(name)
        ranked.append((name, lifted[name] if name in lifted and name not in skip else base[name]))
    if not ranked:
        return None, []
    best = sorted(ranked, key=lambda entry: -entry[1])[:limit]  # stable: ties in the order asked
    return min(rank for _, rank in ranked), best


@pytest.mark.parametrize("seed", range(40))
def test_best_of_ranks_the_names_asked_as_its_definition(seed: int) -> None:
    rng = random.Random(seed)
    pool = [f"n{i}" for i in range(rng.choice([5, 50, 600]))]
    base = {name: rng.randrange(0, 30) for name in pool if rng.random() < 0.9}
    lifted = {name: rng.randrange(0, 40) for name in base if rng.random() < 0.2}
    skip = {name for name in lifted if rng.random() < 0.3}
    base_table, lifted_table, skip_table = sample.RankTable(), sample.RankTable(), sample.RankTable()
    for name, rank in base.items():
        base_table.put(name, rank)
    for name, rank in lifted.items():
        lifted_table.put(name, rank)
    for name in skip:
        skip_table.put(name, 0)
    for _ in range(20):
        names = rng.sample(pool, rng.randint(0, len(pool)))
        if names and rng.random() < 0.2:
            names.append(rng.choice(names))  # a name twice counts once
        limit = rng.choice([1, 2, 16, sample.MAX_LIMIT])
        found = request_names(names)
        got = sample.best_of(found.body, found.start, base_table, lifted_table, skip_table, limit)
        assert got == model_best(names, base, lifted, skip, limit)
        assert sample.best_of(found.body, found.start, base_table, None, None, limit) == model_best(
            names, base, {}, set(), limit
        )


def model_answer(
    names: list[str], base: dict[str, int], lifted: dict[str, int], skip: set[str], limit: int, pick: int
) -> tuple[bytes, str | None, str | None, bytes]:
    """sample.answer by its definition: rankwalk.listed of best_of, and settled as promises.settle settles it."""
    tops: list[str] = []
    plain = listed(model_best(names, base, lifted, skip, limit), tops)
    if not plain:
        return encode_priorities(plain), None, None, encode_priorities(plain)
    chosen = sorted(tops)[pick % len(tops)]
    top, lower = plain[0][1], plain[0][1] - 1
    settled = [(name, lower if score == top and name != chosen else score) for name, score in plain]
    return encode_priorities(plain), plain[0][0], chosen, encode_priorities([e for e in settled if e[1] > 0])


@pytest.mark.parametrize("seed", range(40))
def test_answer_lists_and_settles_the_names_asked_as_the_python_path_does(seed: int) -> None:
    rng = random.Random(seed)
    pool = [f"node-{i}" for i in range(rng.choice([5, 50, 600]))]
    scores = rng.choice([range(0, 2), range(0, 11)])  # few scores: ties for the top, a top lowered to 0
    base = {name: rng.choice(scores) * RANK_SCALE + rng.choice([0, 50, 75]) for name in pool if rng.random() < 0.9}
    lifted = {name: 10 * RANK_SCALE + rng.choice([50, 75]) for name in base if rng.random() < 0.2}
    skip = {name for name in lifted if rng.random() < 0.3}
    tables = [sample.RankTable(), sample.RankTable(), sample.RankTable()]
    for table, ranks in zip(tables, (base, lifted, dict.fromkeys(skip, 0)), strict=True):
        for name, rank in ranks.items():
            table.put(name, rank)
    for _ in range(20):
        names = rng.sample(pool, rng.randint(0, len(pool)))
        limit, pick = rng.choice([1, 2, 16, sample.MAX_LIMIT]), rng.randrange(2**32)
        found = request_names(names)
        got = sample.answer(found.body, found.start, *tables, None, limit, pick)
        assert got == model_answer(names, base, lifted, skip, limit, pick)
        plain = listed(model_best(names, base, lifted, skip, limit))
        assert orjson.loads(got[0]) == [{"Host": name, "Score": score} for name, score in plain]


def test_answer_declines_a_call_that_asks_about_a_node_without_published_state() -> None:
    base, unknown = sample.RankTable(), sample.RankTable()
    for name in ("a", "b"):
        base.put(name, RANK_SCALE)
    unknown.put("u", 0)
    asked = request_names(["a", "b", "never-seen"])  # a name the watch never reported scores the floor
    assert sample.answer(asked.body, asked.start, base, None, None, unknown, 16, 0) is not None
    with_unknown = request_names(["a", "u", "b"])
    assert sample.answer(with_unknown.body, with_unknown.start, base, None, None, unknown, 16, 0) is None
    assert sample.answer(with_unknown.body, with_unknown.start, base, None, None, None, 16, 0) is not None
    with pytest.raises(TypeError, match="unknown"):
        sample.answer(asked.body, asked.start, base, None, None, {"u"}, 16, 0)  # type: ignore[arg-type]


def test_the_compiled_ranks_are_scaled_as_the_python_ranks() -> None:
    assert sample.RANK_SCALE == RANK_SCALE


def test_best_of_refuses_a_limit_it_cannot_keep_a_body_without_names_and_tables_that_are_not_tables() -> None:
    found = request_names(["a"])
    table = sample.RankTable()
    for limit in (0, sample.MAX_LIMIT + 1):
        with pytest.raises(ValueError, match="limit"):
            sample.best_of(found.body, found.start, table, None, None, limit)
    with pytest.raises(ValueError, match="names array"):
        sample.best_of(found.body, 0, table, None, None, 1)
    table.put("a", 1)
    with pytest.raises(TypeError, match="skip"):  # promised nodes by their hashes, not as a collection
        sample.best_of(found.body, found.start, table, table, {"a"}, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lifted"):
        sample.best_of(found.body, found.start, table, {"a": 1}, None, 1)  # type: ignore[arg-type]


def test_hashed_names_keep_their_table_with_them_and_skip_as_the_names_do() -> None:
    names = sample.HashedNames()
    for name in ("a", "b", "c"):
        names.add(name)
    names.discard("b")
    names.discard("x")  # not there: nothing
    assert sorted(names) == ["a", "c"]
    assert len(names) == 2
    assert "a" in names
    assert "b" not in names
    assert names.table is not None
    base, lifted = sample.RankTable(), sample.RankTable()
    for rank, name in enumerate(("a", "b", "c", "d")):
        base.put(name, rank)
        lifted.put(name, 100)
    found = request_names(["a", "b", "c", "d"])
    by_table = sample.best_of(found.body, found.start, base, lifted, names.table, 4)
    assert by_table == (0, [("b", 100), ("d", 100), ("c", 2), ("a", 0)])  # a and c promised: their bases


def test_names_read_from_one_body_are_never_taken_for_another() -> None:
    """The names a call read (its pod's head) are read again for any other body: another bytes object, even at the
    same offsets, or a mutable buffer changed in place."""
    base = sample.RankTable()
    for rank, name in enumerate(["a1", "b2", "c3", "d4"]):
        base.put(name, (rank + 1) * RANK_SCALE)
    first, second = request_names(["a1", "b2"]), request_names(["c3", "d4"])
    assert first.start == second.start
    assert len(first.body) == len(second.body)
    for read in (first.body, bytes(bytearray(first.body))):  # this body, or another object with its bytes
        assert read == first.body
        assert sample.count_names(read, first.start) == 2
        answered = sample.answer(second.body, second.start, base, None, None, None, 16, 0)
        assert answered is not None
        assert orjson.loads(answered[0]) == [{"Host": "d4", "Score": 1}]
    changing = bytearray(first.body)
    assert sample.count_names(changing, first.start) == 2
    changing[:] = second.body  # the same buffer, other names
    answered = sample.answer(changing, second.start, base, None, None, None, 16, 0)
    assert answered is not None
    assert orjson.loads(answered[0]) == [{"Host": "d4", "Score": 1}]
    changing[:] = first.body.replace(b'"a1"', b'"a\\1"')  # no longer plain: refused, not read from before
    with pytest.raises(ValueError, match="names array"):
        sample.answer(changing, first.start, base, None, None, None, 16, 0)
