"""The deep checks that look inside files without torch: zip end records, safetensors
headers, and the byte ranges a DCP `.metadata` pickle names (read, never unpickled)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import zipfile

import pytest
from ckpt_trees import _StorageInfo, rewrite_as_zip64, write_dcp, write_pt, write_safetensors
from rljob_operator.checkpoints.dcp import storage_ends
from rljob_operator.checkpoints.safetensorscheck import safetensors_problem
from rljob_operator.checkpoints.zipcheck import zip_problem


@pytest.mark.parametrize("zip64", [False, True])
def test_whole_zip_archive_has_no_problem(tmp_path, zip64):
    path = write_pt(tmp_path / "x.pt")
    if zip64:
        rewrite_as_zip64(path)
        assert zipfile.ZipFile(path).testzip() is None  # still a valid archive
    assert zip_problem(path) is None


def test_zip_with_a_trailing_comment_is_whole(tmp_path):
    path = tmp_path / "c.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a", b"x" * 100)
        archive.comment = b"PK\x05\x06 looks like a record but is a comment"
    assert zip_problem(path) is None


@pytest.mark.parametrize("zip64", [False, True])
def test_zip_cut_anywhere_is_a_problem(tmp_path, zip64):
    path = write_pt(tmp_path / "x.pt")
    if zip64:
        rewrite_as_zip64(path)
    whole = path.read_bytes()
    for cut in range(len(whole)):
        path.write_bytes(whole[:cut])
        assert zip_problem(path), f"a file cut at {cut} of {len(whole)} bytes passed"


def test_file_that_is_not_a_zip_is_a_problem(tmp_path):
    path = tmp_path / "legacy.pt"
    path.write_bytes(pickle.dumps({"old": "format"}) * 10)
    assert "no zip end-of-central-directory" in zip_problem(path)


def test_zip_whose_central_directory_moved_is_a_problem(tmp_path):
    path = write_pt(tmp_path / "x.pt")
    data = bytearray(path.read_bytes())
    start = data.find(b"PK\x01\x02")  # the first entry, where the end record points
    data[start : start + 4] = b"XXXX"
    path.write_bytes(bytes(data))
    assert "no central directory" in zip_problem(path)


def test_safetensors_whole_and_cut(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors")
    assert safetensors_problem(path) is None
    whole = path.read_bytes()
    for cut in (0, 4, 8, 20, len(whole) - 1):
        path.write_bytes(whole[:cut])
        assert safetensors_problem(path), f"cut at {cut} passed"
    path.write_bytes(whole + b"extra")
    assert "its header says" in safetensors_problem(path)


def test_storage_ends_reads_every_shard_range_from_a_dcp_like_pickle(tmp_path):
    folder = write_dcp(tmp_path / "d", ranks=3, items=4, size=50)
    assert storage_ends((folder / ".metadata").read_bytes()) == {
        "__0_0.distcp": 200,
        "__1_0.distcp": 200,
        "__2_0.distcp": 200,
    }


def test_storage_ends_does_not_execute_the_pickle():
    class Boom:
        def __reduce__(self):
            return (sys.exit, ("executed",))

    data = pickle.dumps({"a": Boom(), "s": _StorageInfo("__0_0.distcp", 5, 10)}, protocol=4)
    assert storage_ends(data) == {"__0_0.distcp": 15}


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_storage_ends_follows_memo_references_in_every_protocol(protocol):
    infos = [_StorageInfo("__0_0.distcp", i * 10, 10) for i in range(5)]
    data = pickle.dumps({"storage_data": infos}, protocol=protocol)
    assert storage_ends(data) == {"__0_0.distcp": 50}


def test_storage_ends_rejects_a_cut_pickle():
    data = pickle.dumps({"s": _StorageInfo("__0_0.distcp", 0, 10)}, protocol=4)
    with pytest.raises(ValueError):
        storage_ends(data[:-3])


REAL_TORCH = """
import sys, torch, torch.distributed.checkpoint as dcp
dcp.save({"w": torch.randn(64, 32), "b": torch.arange(7), "n": 3}, checkpoint_id=sys.argv[1])
torch.save({"a": torch.ones(5)}, sys.argv[1] + "/extra.pt")
"""


def test_deep_checks_read_what_real_torch_writes(tmp_path):
    """The shapes above are checked against torch itself where it is installed."""
    pytest.importorskip("torch")
    folder = tmp_path / "global_step_3"
    subprocess.run([sys.executable, "-c", REAL_TORCH, str(folder)], check=True, timeout=300)
    ends = storage_ends((folder / ".metadata").read_bytes())
    shard = folder / "__0_0.distcp"
    assert set(ends) == {"__0_0.distcp"} and ends["__0_0.distcp"] == shard.stat().st_size
    assert zip_problem(folder / "extra.pt") is None
    data = (folder / "extra.pt").read_bytes()
    (folder / "extra.pt").write_bytes(data[:-30])
    assert zip_problem(folder / "extra.pt")
