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
