"""The rank-collapse explorer, without a browser: its data, its figure and its update."""

import numpy as np
import pytest

ipywidgets = pytest.importorskip("ipywidgets")

from convres.widgets import explorer_data, explorer_figure, figure_png, rank_collapse_explorer, update_image  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def test_explorer_data_spectra_and_collapse():
    lo, hi = explorer_data(1.0, 4, 6), explorer_data(1.0, 16384, 6)
    assert lo["sv_attn"].shape == (6,) and hi["sv_Z"].shape == (6,)
    assert np.all(np.diff(hi["sv_Z"]) <= 0)
    assert hi["attn"]["rank_one_residual"] < lo["attn"]["rank_one_residual"]
    assert hi["Z"]["sigma_min"] > 10 * hi["attn"]["sigma_min"]
    zero = explorer_data(0.0, 64, 6)
    assert np.allclose(zero["sv_Z"], zero["sv_attn"])       # beta = 0: Z is Attn(X)


def test_explorer_figure_with_runs():
    data = explorer_data(1.0, 1024, 4, gd_steps=5)
    assert set(data["runs"]) == {0.0, 1.0}
    fig = explorer_figure(data)
    assert len(fig.axes) == 2 and len(fig.axes[1].lines) == 2
    assert fig.axes[1].get_position().y1 < fig.axes[0].get_position().y0   # stacked: the page is narrow
    assert figure_png(fig).startswith(PNG)


def test_picture_is_sharp_at_its_display_width():
    # the PNG has at least 2 pixels per CSS pixel of its largest display width: never upscaled
    import struct
    from convres.widgets import DISPLAY_WIDTH_PX
    png = figure_png(explorer_figure(explorer_data(1.0, 64, 4)))
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 2 * DISPLAY_WIDTH_PX - 1 and 0.4 < height / width < 0.8
    box = rank_collapse_explorer(beta=1.0, d_qk=64, n=4)
    assert box.children[-1].layout.max_width == f"{DISPLAY_WIDTH_PX}px"


def test_update_changes_image_and_label():
    img, label = ipywidgets.Image(format="png"), ipywidgets.HTML()
    update_image(img, label, 1.0, 4, 5)
    first = bytes(img.value)
    assert first.startswith(PNG) and "σ_min(Z) = " in label.value
    assert "<" not in label.value and "color" not in label.value      # plain text: the page's colours
    data = update_image(img, label, 0.2, 16384, 3)
    assert bytes(img.value) != first and data["n"] == 3 and data["d_qk"] == 16384


def test_sliders_redraw():
    box = rank_collapse_explorer(beta=1.0, d_qk=64, n=4)
    (s_beta, s_dqk), (s_n, _), label, image = box.children[0].children, box.children[1].children, *box.children[2:]
    before = bytes(image.value)
    assert before.startswith(PNG)
    s_n.value = 6
    assert bytes(image.value) != before
    s_dqk.value = 4096
    assert "σ_min(Attn(X)) = " in label.value
    with pytest.raises(ValueError, match="d_qk"):
        rank_collapse_explorer(d_qk=3)
    with pytest.raises(ValueError, match="beta"):
        rank_collapse_explorer(beta=2.5)


def test_changing_n_keeps_the_weights():
    small, large = explorer_data(1.0, 64, 4), explorer_data(1.0, 64, 8)
    assert small["sv_X"].shape == (4,) and large["sv_X"].shape == (8,)
    # the instance behind n = 4 is the first 4 tokens of the one behind n = 8, same weights
    from convres.collapse import gaussian_instance
    a, b = gaussian_instance(4, 16, 64), gaussian_instance(8, 16, 64)
    assert all(np.array_equal(a[w].numpy(), b[w].numpy()) for w in ("W_Q", "W_K", "W_V"))
