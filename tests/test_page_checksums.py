"""Every parquet file a build writes carries page checksums, and every CASU reader verifies them:
a byte changed inside a data page is an error naming the file even where no build record
(`casu_build.json`) lists the file's sha256 (the harness, the cue checks)."""

import shutil

import pyarrow.parquet as pq
import pytest
from conftest import harness_run


def _column_chunk(f, column):
    rg = pq.ParquetFile(f).metadata.row_group(0)
    return next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema == column)


def _flip_in_page(f, column):
    """Flip one bit near the end of `column`'s first column chunk: inside a data page's payload,
    past its header, so the file still parses and only the CRC can tell."""
    c = _column_chunk(f, column)
    start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
    pos = start + c.total_compressed_size - 3
    b = bytearray(f.read_bytes())
    b[pos] ^= 0x01
    f.write_bytes(bytes(b))


@pytest.fixture
def no_record(casu_small, tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(casu_small, d)
    (d / "casu_build.json").unlink()
    return d


def test_every_built_file_is_written_with_page_checksums(casu_small, tmp_path):
    files = sorted(casu_small.rglob("*.parquet"))
    assert {f.parent.name for f in files} >= {"scenes", "role_inference", "contextual_reasoning"}
    for f in files:
        copy = tmp_path / f.name
        shutil.copyfile(f, copy)
        _flip_in_page(copy, "audio.bytes")  # every config has the mixture's FLAC bytes
        pq.read_table(f, page_checksum_verification=True)  # the original verifies
        with pytest.raises(OSError, match="CRC checksum verification failed"):
            pq.read_table(copy, page_checksum_verification=True)


def test_harness_names_a_changed_page_without_a_build_record(no_record, tmp_path):
    rc, _, err = harness_run(no_record, tmp_path / "ok")
    assert rc == 0, err  # no record: the data is still read, and verified page by page
    f = next((no_record / "role_inference").glob("*.parquet"))
    _flip_in_page(f, "question")
    rc, out, err = harness_run(no_record, tmp_path / "bad")
    assert rc == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert f"role_inference/{f.name}" in line and "checksum" in line, line
    assert not list((tmp_path / "bad").rglob("*.json")), "no results from a changed file"


def test_cue_checks_name_a_changed_scenes_page(no_record):
    from casu_dataset.core.errors import LoadError
    from casu_dataset.mix.cue_checks import check_folder

    f = next((no_record / "scenes").glob("*.parquet"))
    _flip_in_page(f, "events.bytes")
    with pytest.raises(LoadError, match="checksum") as e:
        check_folder(no_record, threads=1)
    assert str(f) in str(e.value)
