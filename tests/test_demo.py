"""The main job on a small synthetic collection: it runs and shows the paper's effect."""

import numpy as np
import pytest

from streamk.cli import main
from streamk.demo import average_precision, run_demo


def test_average_precision_by_hand():
    # positives {3, 7} found at ranks 1 and 3 (0-based 0 and 2): (1/1 + 2/3) / 2
    assert np.isclose(average_precision(np.array([3, 5, 7, 1]), np.array([3, 7])), (1 + 2 / 3) / 2)
    assert average_precision(np.array([1, 2]), np.array([9])) == 0.0


def test_demo_weighting_beats_sum_pooling_on_bursts():
    lines = []
    rows = run_demo(configs=(("fv", 16, {"hard": True}),), out=lines.append)
    m = {method: mAP for _, method, mAP, _, _ in rows}
    assert m["democratic"] > m["sum"] + 5 and m["gmp"] > m["sum"] + 5
    assert any("mAP" in line for line in lines)


def test_cli_rejects_unknown_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
