"""Line numbers doctor cites are the file's own: counted at each \\n, whatever else the log holds (tqdm's progress
bars redraw themselves with a lone \\r, which str.splitlines() would count as line breaks too)."""

from __future__ import annotations

from vllm_repo.doctor import diagnose_file

BAR = (
    "Loading safetensors checkpoint shards:   0% Completed | 0/2\r"
    "Loading safetensors checkpoint shards: 100% Completed | 2/2"
)


def _log(tmp_path, lines):
    path = tmp_path / "tritonserver.log"
    path.write_bytes("\n".join(lines).encode() + b"\n")
    return path


def _line_of(path, number):
    return path.read_bytes().split(b"\n")[number - 1].decode()


def test_a_finding_after_a_progress_bar_cites_the_files_line(tmp_path):
    path = _log(
        tmp_path,
        [
            "I1206 10:00:00.000000 1 server.cc:1] starting",
            BAR,
            BAR,
            "E1206 10:00:05.000000 1 model_lifecycle.cc:642] \"failed to load 'tiny' version 1: Internal: "
            'OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."',
        ],
    )
    diagnosis = diagnose_file(path)
    assert diagnosis.root.code == "VD106"
    assert diagnosis.root.line == 4 and "CUDA out of memory" in _line_of(path, 4)


def test_the_first_error_lines_of_a_log_no_cause_explains_are_numbered_as_in_the_file(tmp_path):
    path = _log(tmp_path, [BAR, BAR, 'E1206 10:00:05.000000 1 server.cc:1] "the flux capacitor is out of phase"'])
    diagnosis = diagnose_file(path)
    assert [e.number for e in diagnosis.first_errors] == [3]


def test_a_pattern_still_matches_the_part_of_a_line_after_a_progress_bar(tmp_path):
    # tqdm writes to stderr and Triton to stdout: a bar's last redraw may lead the next line of the log.
    path = _log(
        tmp_path, ["I1206 starting", BAR + "\rtorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."]
    )
    diagnosis = diagnose_file(path)
    assert (diagnosis.root.code, diagnosis.root.line) == ("VD106", 2)
