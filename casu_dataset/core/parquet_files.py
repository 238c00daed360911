"""How CASU writes and reads parquet: the write options of every dataset file, and readers that
check each page's CRC.

Page checksums make a changed byte in a data page an error naming the file even where no build
record (`casu_build.json`) lists the file's sha256: a folder copied without it, a single file
handed around, or a shard in the middle of a merge. FLAC bytes do not compress further; snappy
keeps the text columns small and the write fast. pyarrow writes no timestamps, so a file is a
pure function of its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "snappy",
    "write_statistics": False,
    "write_page_checksum": True,
}
CRC_FAILED = "CRC checksum verification failed"


def open_parquet(path: Path | str) -> Any:
    """A `pyarrow.parquet.ParquetFile` whose pages are checked against their CRC as they are read."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(str(path), page_checksum_verification=True)


def read_parquet(source: Any, **kwargs: Any) -> Any:
    """`pyarrow.parquet.read_table` with every page checked against its CRC."""
    import pyarrow.parquet as pq

    return pq.read_table(source, page_checksum_verification=True, **kwargs)


def describe_read_error(err: BaseException) -> str:
    """A reader's error in words: a failed page checksum means the bytes changed after writing."""
    text = str(err)
    if CRC_FAILED in text:
        return f"a data page does not match its checksum: the file changed after it was written ({text})"
    return text


def row_groups(
    path: Path, columns: list[str] | None, error: Callable[[str], Exception]
) -> Iterator[list[dict]]:
    """A file's rows, one row group at a time (stems are large: never the whole file), every page
    checked against its CRC. A file pyarrow cannot read, or whose checksums fail, raises
    `error(why)`; only reading is guarded, so an error in the caller's loop body passes as it is."""
    try:
        pf = open_parquet(path)
        for g in range(pf.num_row_groups):
            yield pf.read_row_group(g, columns=columns, use_threads=False).to_pylist()
    except (OSError, ValueError) as err:  # pyarrow's read errors are OSError/ValueError subclasses
        raise error(describe_read_error(err)) from None
