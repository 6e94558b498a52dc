"""Link loss through the driver: the broken MSR fails (no partial frame), the next use reconnects, re-applies the
last settings, and the frame says so. Over a real pty (behind a stable symlink, like /dev/serial/by-id) and TCP."""

from __future__ import annotations

import numpy as np
import pytest

from chamber.driver import Chamber
from chamber.errors import LinkLost
from chamber.serial_backend import SerialBackend
from chamber.testing import FAST_TIMING, CountingModel
from simulator.board import running_board
from simulator.board_protocol import BoardFaults


@pytest.mark.parametrize("transport", ["pty", "tcp"])
@pytest.mark.parametrize("fault", [{"vanish_after_rows": 40}, {"reset_after_rows": 40}], ids=["vanish", "reset"])
def test_link_loss_mid_msr_then_reconnect_and_reapply(transport, fault):
    with running_board("wt", transport, model=CountingModel(), stable_path=True) as board:
        chamber = Chamber(SerialBackend(board.url, timing=FAST_TIMING), backoff=(0.02, 0.05, 0.1, 0.2)).connect()
        chamber.set_many({"load_in": 0.5, "hatch": 20, "flag": 4})
        first = chamber.measure(10)
        board.faults = BoardFaults(**fault)  # one-shot switches: a fresh object per test
        with pytest.raises(LinkLost):
            chamber.measure(100)
        frame = chamber.measure(10)
        assert frame.reconnected
        assert frame.link["reconnects"] == 1
        assert frame.column("counter").tolist() == list(range(10))  # a fresh board session
        assert np.all(frame.column("load_in") == 0.5) and np.all(frame.column("hatch") == 20)
        assert np.all(frame.column("flag") == 4)
        assert board.firmware.model.state()["load_in"] == 0.5
        assert not first.reconnected and not chamber.measure(2).reconnected
        chamber.close()


def test_reconnect_gives_up_with_link_lost_when_the_board_is_gone():
    with running_board("wt", "tcp", model=CountingModel()) as board:
        chamber = Chamber(SerialBackend(board.url, timing=FAST_TIMING), backoff=(0.01, 0.01)).connect()
        board.faults = BoardFaults(vanish_after_rows=5)
        with pytest.raises(LinkLost):
            chamber.measure(50)
        board.stop_event.set()
        board.thread.join()
        board.board.transport.close()
        with pytest.raises(LinkLost, match="could not reconnect after 2 attempts"):
            chamber.measure(5)
        chamber.close()
