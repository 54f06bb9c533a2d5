"""ended_pipes: which output pipes are at their end of file before they are watched."""

from __future__ import annotations

import os

from hostcapd.process.output import ended_pipes


def test_only_a_pipe_with_no_writer_and_nothing_in_it_has_ended() -> None:
    pipes = [os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK) for _ in range(3)]
    (empty_r, empty_w), (full_r, full_w), (open_r, _open_w) = pipes
    try:
        os.write(full_w, b"late output")
        os.close(empty_w)  # the writer is gone, nothing was written
        os.close(full_w)  # gone too, but its output is still to be read
        assert ended_pipes([empty_r, full_r, open_r]) == {empty_r}
        assert os.read(full_r, 100) == b"late output"  # nothing was taken from it
        assert ended_pipes([full_r]) == {full_r}
        assert ended_pipes([]) == set()
    finally:
        for fd in (empty_r, full_r, open_r, _open_w):
            os.close(fd)
