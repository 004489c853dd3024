from collections.abc import Callable, Mapping, MutableMapping, Sequence

MAX_LIMIT: int
RANK_SCALE: int

class RankTable:
    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def put(self, name: str, rank: int, /) -> None: ...
    def drop(self, name: str, /) -> None: ...
    def get(self, name: str, /) -> int | None: ...

def count_names(body: bytes, start: int, /) -> int: ...
def best_of(
    body: bytes,
    start: int,
    base: RankTable,
    lifted: RankTable | None,
    skip: RankTable | None,
    limit: int,
    /,
) -> tuple[int | None, list[tuple[str, int]]]: ...
def answer(
    body: bytes,
    start: int,
    base: RankTable,
    lifted: RankTable | None,
    skip: RankTable | None,
    unknown: RankTable | None,
    limit: int,
    pick: int,
    /,
) -> tuple[bytes, str | None, str | None, bytes] | None: ...
def one_slot_head(body: bytes, /) -> tuple[str, str, int] | None: ...

class FastPath:
    until: float
    def __init__(
        self,
        path: str,
        clock: Callable[[], float],
        limit: int,
        max_body: int,
        latency_bounds: Sequence[float] = (),
    ) -> None: ...
    @property
    def armed(self) -> bool: ...
    @property
    def bitstreams(self) -> frozenset[str]: ...
    @property
    def latency(self) -> tuple[int, float, tuple[int, ...]]: ...
    def serve(
        self, data: bytes | bytearray, write: Callable[[bytes], object], /
    ) -> int | tuple[int, BaseException] | None: ...
    def keep(
        self,
        counted: MutableMapping[str, None],
        counted_limit: int,
        unweighed: list[str],
        change_memory: int,
        weigh: Callable[[], None],
        promises: tuple[object, ...] | None,
        /,
    ) -> None: ...
    def arm(self, cache: object, since: float, until: float, promised: Mapping[str, object] | None, /) -> None: ...
    def disarm(self) -> None: ...
    def clear(self) -> None: ...
    def put(
        self,
        bitstream: str,
        base: RankTable,
        lifted: RankTable | None,
        skip: RankTable | None,
        unknown: RankTable | None,
        /,
    ) -> None: ...
    def drop(self, bitstream: str, /) -> None: ...
