"""SSIM / MS-SSIM: against pytorch_msssim ("valid"), a scipy reference ("same"), closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage

from ensml.train.msssim import STANDARD_SCALE_WEIGHTS, ms_ssim, ssim

K = (0.01, 0.03)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster, and fair to the other processes on the machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def smooth(n: int, c: int, h: int, w: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    """(n, c, h, w) sums of random waves, periodic in longitude, values of order 1."""
    rng = np.random.default_rng(seed)
    lat, lon = np.linspace(0, np.pi, h)[:, None], np.linspace(0, 2 * np.pi, w, endpoint=False)[None]
    out = np.zeros((n, c, h, w))
    for m in range(1, 5):
        a, p, q = rng.normal(size=(n, c, 1, 1)), *rng.uniform(0, 2 * np.pi, (2, n, c, 1, 1))
        out += a / m * np.cos(m * lat + p) * np.sin(m * lon + q)
    return torch.tensor(out, dtype=dtype)


def ref_maps(x, y, data_range, win=7, sigma=1.5, periodic=True, k=K):
    """Independent (H, W) SSIM and cs maps of 2-D float64 arrays, "same" padding, via scipy."""
    c = np.arange(win) - win // 2
    g = np.exp(-(c**2) / (2 * sigma**2))
    g /= g.sum()

    def blur(z):  # scipy's "mirror" is torch's "reflect" (the edge value is not repeated)
        z = ndimage.correlate1d(z, g, axis=0, mode="mirror")
        return ndimage.correlate1d(z, g, axis=1, mode="wrap" if periodic else "mirror")

    mx, my = blur(x), blur(y)
    vx, vy, cxy = blur(x * x) - mx**2, blur(y * y) - my**2, blur(x * y) - mx * my
    c1, c2 = (k[0] * data_range) ** 2, (k[1] * data_range) ** 2
    cs = (2 * cxy + c2) / (vx + vy + c2)
    return (2 * mx * my + c1) / (mx**2 + my**2 + c1) * cs, cs


def ref_ms_ssim(x, y, data_range, weights, scale_weights, periodic=True):
    """MS-SSIM from :func:`ref_maps`; (N, C, H, W) arrays, (H,) weights; the documented odd-size rule."""
    out = np.ones(x.shape[:2])
    for i, e in enumerate(scale_weights):
        for n, c in np.ndindex(*x.shape[:2]):
            s, cs = ref_maps(x[n, c], y[n, c], data_range, periodic=periodic)
            m = s if i == len(scale_weights) - 1 else cs
            out[n, c] *= max(np.average(m.mean(1), weights=weights), 0) ** e
        if x.shape[-2] % 2:  # an odd size: repeat the last row; the first column if periodic, else the last
            x, y, weights = (np.concatenate([z, z[..., -1:, :]], -2) for z in (x, y, weights[:, None]))
            weights = weights[:, 0]
        if x.shape[-1] % 2:
            x, y = (np.concatenate([z, z[..., :1] if periodic else z[..., -1:]], -1) for z in (x, y))
        h, w = x.shape[-2:]
        x, y = (z.reshape(*z.shape[:2], h // 2, 2, w // 2, 2).mean((3, 5)) for z in (x, y))
        weights = weights.reshape(-1, 2).mean(1)
    return out.mean()


# --- "valid" padding: exactly pytorch_msssim ---------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("shape", "win", "scale_weights", "k"),
    [
        ((2, 2, 161, 176), 11, None, K),  # 5 scales, 161 → 81 → 41 → 21 → 11: odd pooling each time
        ((2, 1, 97, 130), 7, [0.2, 0.3, 0.5], (0.02, 0.05)),  # 3 scales (pytorch_msssim needs > 96)
    ],
)
@pytest.mark.parametrize("field", ["random", "smooth"])
def test_valid_matches_pytorch_msssim(dtype, shape, win, scale_weights, k, field) -> None:
    pm = pytest.importorskip("pytorch_msssim")
    if field == "random":
        g = torch.Generator().manual_seed(0)
        x = torch.rand(shape, generator=g, dtype=dtype)
        y = (x + 0.3 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
        rng = 1.0
    else:
        x, y = smooth(*shape, seed=1, dtype=dtype), smooth(*shape, seed=2, dtype=dtype)
        y = 0.7 * x + 0.3 * y
        rng = float(y.max() - y.min())
    opts = dict(win_size=win, k=k, periodic_lon=False, padding="valid")
    ref = pm.ssim(x, y, data_range=rng, win_size=win, K=k)
    assert ssim(x, y, rng, **opts).item() == pytest.approx(ref.item(), abs=1e-5)
    ref = pm.ms_ssim(x, y, data_range=rng, win_size=win, weights=scale_weights, K=k)
    got = ms_ssim(x, y, rng, scale_weights=scale_weights, **opts)
    assert got.dtype == dtype and got.ndim == 0
    assert got.item() == pytest.approx(ref.item(), abs=1e-5)
    assert 0.1 < got.item() < 0.99  # a discriminating case, not a trivial 0 or 1


# --- "same" padding: an independent scipy reference ---------------------------------------------


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("hw", [(16, 24), (3, 4)])  # (3, 4): the window is wider than the grid
def test_same_ssim_matches_scipy_reference(periodic, hw) -> None:
    x, y = smooth(2, 2, *hw, seed=3), smooth(2, 2, *hw, seed=4)
    weights = torch.linspace(0.2, 1.5, hw[0], dtype=torch.float64)
    want = np.mean(
        [
            np.average(
                ref_maps(x[n, c].numpy(), y[n, c].numpy(), 2.0, periodic=periodic)[0].mean(1), weights=weights
            )
            for n, c in np.ndindex(2, 2)
        ]
    )
    assert ssim(x, y, 2.0, weights=weights, periodic_lon=periodic).item() == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("periodic", [True, False])
def test_same_ms_ssim_matches_scipy_reference(periodic) -> None:
    # 32 × 64 (the default grid), win 7: the default keeps the 3 scales that hold a window, renormalised.
    x, y = smooth(2, 1, 32, 64, seed=5), smooth(2, 1, 32, 64, seed=6)
    y = 0.8 * x + 0.2 * y
    w = torch.cos(torch.linspace(-1.5, 1.5, 32, dtype=torch.float64))
    sw = np.array(STANDARD_SCALE_WEIGHTS[:3]) / sum(STANDARD_SCALE_WEIGHTS[:3])
    want = ref_ms_ssim(x.numpy(), y.numpy(), 2.0, w.numpy(), sw, periodic)
    got = ms_ssim(x, y, 2.0, weights=w, periodic_lon=periodic)
    assert got.item() == pytest.approx(want, abs=1e-12)
    # Given the 5 weights, all 5 scales are used (down to 2 × 4), which gives another value.
    want5 = ref_ms_ssim(x.numpy(), y.numpy(), 2.0, w.numpy(), STANDARD_SCALE_WEIGHTS, periodic)
    got5 = ms_ssim(x, y, 2.0, weights=w, periodic_lon=periodic, scale_weights=STANDARD_SCALE_WEIGHTS)
    assert got5.item() == pytest.approx(want5, abs=1e-12)
    assert abs(got5.item() - got.item()) > 1e-4


@pytest.mark.parametrize("periodic", [True, False])
def test_same_ms_ssim_odd_sizes(periodic) -> None:
    # 33 × 65 → 17 × 33 → 9 × 17 → 5 × 9: an odd size at every pooling.
    x, y = smooth(2, 1, 33, 65, seed=24), smooth(2, 1, 33, 65, seed=25)
    y = 0.6 * x + 0.4 * y
    w = torch.cos(torch.linspace(-1.5, 1.5, 33, dtype=torch.float64))
    sw = [0.1, 0.3, 0.3, 0.3]
    want = ref_ms_ssim(x.numpy(), y.numpy(), 2.0, w.numpy(), sw, periodic)
    assert ms_ssim(x, y, 2.0, weights=w, periodic_lon=periodic, scale_weights=sw).item() == pytest.approx(
        want, abs=1e-12
    )


# --- closed forms and hand cases ----------------------------------------------------------------


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("periodic", [True, False])
def test_identical_inputs_give_exactly_one(padding, periodic) -> None:
    x = 5.5e4 + 100 * smooth(3, 2, 40, 48, seed=7, dtype=torch.float32)
    opts = dict(padding=padding, periodic_lon=periodic)
    assert ssim(x, x.clone(), 400.0, **opts).item() == 1.0
    assert ms_ssim(x, x.clone(), 400.0, scale_weights=[0.4, 0.6], **opts).item() == 1.0
    if padding == "same":
        assert ms_ssim(x, x.clone(), 400.0, **opts).item() == 1.0
    w = torch.rand(40)
    assert ms_ssim(x, x.clone(), 400.0, weights=w, scale_weights=[0.4, 0.6], **opts).item() == pytest.approx(
        1.0
    )


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_constant_shift_changes_only_luminance(padding) -> None:
    a, c, rng = 3.0, 0.5, 2.0
    x = torch.full((1, 1, 32, 64), a, dtype=torch.float64)
    c1 = (K[0] * rng) ** 2
    lum = (2 * a * (a + c) + c1) / (a**2 + (a + c) ** 2 + c1)  # σ = 0: cs = C2 / C2 = 1
    assert ssim(x, x + c, rng, padding=padding).item() == pytest.approx(lum, rel=1e-12)
    # MS-SSIM: cs = 1 at every scale, so lum^w_last; the default's last scale is the 3rd of 5, renormalised.
    w_last = STANDARD_SCALE_WEIGHTS[2] / sum(STANDARD_SCALE_WEIGHTS[:3])
    assert ms_ssim(x, x + c, rng).item() == pytest.approx(lum**w_last, rel=1e-12)
    assert ms_ssim(x, x + c, torch.tensor(rng)).item() == pytest.approx(lum**w_last, rel=1e-12)  # 0-d L
    # A non-constant field shifted by c: σx = σy = σxy, so the map is the luminance term of the local means.
    z = smooth(1, 1, 32, 64, seed=8)
    s, cs = ref_maps(z[0, 0].numpy(), z[0, 0].numpy() + c, rng)
    np.testing.assert_allclose(cs, 1.0, rtol=1e-12)
    assert ssim(z, z + c, rng).item() == pytest.approx(s.mean(), rel=1e-12)
    assert ssim(z, z + c, rng).item() < 0.99


def test_negated_zero_mean_field() -> None:
    x = torch.randn(2, 1, 32, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = x - x.mean((-2, -1), keepdim=True)
    assert ms_ssim(x, -x, 2.0).item() == 0.0  # cs < 0 at the finest scale: relu gives 0, not NaN
    # Single-scale SSIM does not see the flip: cs ≈ −1 and the luminance term of opposite local means
    # is negative too, so their product is high (pytorch_msssim gives the same; module docstring).
    maps = [ref_maps(x[n, 0].numpy(), -x[n, 0].numpy(), 2.0) for n in range(2)]
    assert np.mean([cs.mean() for _, cs in maps]) < -0.9
    assert ssim(x, -x, 2.0).item() == pytest.approx(np.mean([s.mean() for s, _ in maps]), abs=1e-12)
    assert ssim(x, -x, 2.0).item() > 0.5


def test_float32_far_from_zero() -> None:
    """Geopotential-like values (~5.5e4 m² s⁻²): float32 agrees with float64."""
    x = 5.5e4 + 300 * smooth(2, 1, 32, 64, seed=10)
    y = x + 100 * smooth(2, 1, 32, 64, seed=11)
    want = ms_ssim(x, y, 600.0).item()
    assert ms_ssim(x.float(), y.float(), 600.0).item() == pytest.approx(want, abs=1e-5)
    assert 0.1 < want < 0.99


# --- periodicity and latitude weights -----------------------------------------------------------


def test_roll_along_longitude() -> None:
    x, y = smooth(2, 1, 32, 64, seed=12), smooth(2, 1, 32, 64, seed=13)
    y = (
        0.5 * x
        + 0.5 * y
        + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=x.dtype)
    )
    rolled = [z.roll(5, -1) for z in (x, y)]
    assert ssim(*rolled, 2.0).item() == pytest.approx(ssim(x, y, 2.0).item(), abs=1e-6)
    assert (
        abs(ssim(*rolled, 2.0, periodic_lon=False).item() - ssim(x, y, 2.0, periodic_lon=False).item()) > 1e-4
    )
    rolled = [z.roll(12, -1) for z in (x, y)]  # 3 scales: invariant to rolls by multiples of 2² columns
    assert ms_ssim(*rolled, 2.0).item() == pytest.approx(ms_ssim(x, y, 2.0).item(), abs=1e-6)
    assert (
        abs(ms_ssim(*rolled, 2.0, periodic_lon=False).item() - ms_ssim(x, y, 2.0, periodic_lon=False).item())
        > 1e-4
    )


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_latitude_weights(padding) -> None:
    x, y = smooth(2, 1, 40, 48, seed=14), smooth(2, 1, 40, 48, seed=15)
    ones = torch.ones(40, dtype=torch.float64)
    opts = dict(padding=padding, periodic_lon=False, scale_weights=[0.4, 0.6])
    assert ssim(x, y, 2.0, weights=ones, padding=padding).item() == pytest.approx(
        ssim(x, y, 2.0, padding=padding).item(), abs=1e-14
    )
    assert ms_ssim(x, y, 2.0, weights=ones, **opts).item() == pytest.approx(
        ms_ssim(x, y, 2.0, **opts).item(), abs=1e-14
    )
    # All weight on row 10: that row's mean SSIM. "valid" maps are the interior of the "same" ones.
    row = torch.zeros(40, dtype=torch.float64)
    row[10] = 3.0
    p = 3 if padding == "valid" else 0
    want = np.mean(
        [
            ref_maps(x[n, 0].numpy(), y[n, 0].numpy(), 2.0, periodic=False)[0][10, p : 48 - p].mean()
            for n in range(2)
        ]
    )
    got = ssim(x, y, 2.0, weights=row, padding=padding, periodic_lon=False)
    assert got.item() == pytest.approx(want, abs=1e-12)


# --- gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [ssim, ms_ssim])
def test_gradient_matches_finite_differences(fn) -> None:
    x, y = smooth(1, 2, 16, 24, seed=16), smooth(1, 2, 16, 24, seed=17)
    y = 0.7 * x + 0.3 * y  # cs > 0 at every scale, so no relu at 0 flattens the gradient
    w = torch.linspace(0.5, 1.0, 16, dtype=torch.float64)
    opts = dict(weights=w) if fn is ssim else dict(weights=w, scale_weights=[0.3, 0.7])
    xg, yg = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    gx, gy = torch.autograd.grad(fn(xg, yg, 2.0, **opts), (xg, yg))
    assert torch.isfinite(gx).all() and torch.isfinite(gy).all() and gx.abs().max() > 1e-3
    g = torch.Generator().manual_seed(1)
    for _ in range(3):  # central differences along random directions, float64
        u, v, eps = (
            torch.randn(x.shape, generator=g, dtype=x.dtype),
            torch.randn(y.shape, generator=g, dtype=x.dtype),
            1e-6,
        )
        fd = (fn(x + eps * u, y + eps * v, 2.0, **opts) - fn(x - eps * u, y - eps * v, 2.0, **opts)) / (
            2 * eps
        )
        assert fd.item() == pytest.approx(((gx * u).sum() + (gy * v).sum()).item(), rel=1e-6, abs=1e-9)


def test_descent_moves_x_towards_y() -> None:
    y = smooth(2, 1, 32, 64, seed=18, dtype=torch.float32)
    x = (y + 0.5 * smooth(2, 1, 32, 64, seed=19, dtype=torch.float32)).requires_grad_(True)
    w = torch.cos(torch.linspace(-1.5, 1.5, 32))
    start, dist = 1 - ms_ssim(x, y, 2.0, weights=w).item(), (x - y).norm().item()
    for _ in range(20):
        loss = 1 - ms_ssim(x, y, 2.0, weights=w)
        (grad,) = torch.autograd.grad(loss, x)
        assert torch.isfinite(grad).all() and grad.abs().max() > 0
        with torch.no_grad():
            x -= 0.02 * grad / grad.abs().max()  # normalised steps of at most 0.02 per point
    assert loss.item() < 0.5 * start
    assert (x - y).norm().item() < dist


# --- small grids and bad inputs -----------------------------------------------------------------


@pytest.mark.parametrize("hw", [(2, 2), (5, 7), (33, 65)])
def test_small_and_odd_grids(hw) -> None:
    x, y = smooth(1, 1, *hw, seed=20), smooth(1, 1, *hw, seed=21)
    for periodic in (True, False):
        assert ms_ssim(x, x, 2.0, periodic_lon=periodic, scale_weights=STANDARD_SCALE_WEIGHTS).item() == 1.0
        assert np.isfinite(
            ms_ssim(x, y, 2.0, periodic_lon=periodic, scale_weights=STANDARD_SCALE_WEIGHTS).item()
        )


def test_default_scales_stop_at_window() -> None:
    x, y = smooth(1, 1, 32, 64, seed=22), smooth(1, 1, 32, 64, seed=23)
    for win, n in ((7, 3), (3, 4), (11, 2)):  # scales with min(H, W) ≥ win: 32, 16, 8, 4
        sw = [s / sum(STANDARD_SCALE_WEIGHTS[:n]) for s in STANDARD_SCALE_WEIGHTS[:n]]
        want = ms_ssim(x, y, 2.0, win_size=win, scale_weights=sw).item()
        assert ms_ssim(x, y, 2.0, win_size=win).item() == pytest.approx(want, abs=1e-14)


X = torch.zeros(1, 1, 32, 64)


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "match"),
    [
        (ssim, (X[0], X[0], 1.0), {}, r"must be \(N, C, H, W\), got 3-d and 3-d"),
        (ms_ssim, (X, X[..., :60], 1.0), {}, "shapes differ"),
        (ssim, (X, X, 1.0), {"win_size": 6}, "win_size must be odd and positive, got 6"),
        (ms_ssim, (X, X, 1.0), {"padding": "full"}, "padding must be 'same' or 'valid', got 'full'"),
        (ssim, (X, X, 0.0), {}, "data_range must be positive"),
        (ms_ssim, (X, X, torch.tensor(-1.0)), {}, "data_range must be positive"),
        (ssim, (X, X, 1.0), {"weights": torch.ones(64)}, r"weights must be \(H,\) = \(32,\)"),
        (ms_ssim, (X, X, 1.0), {"padding": "valid"}, r"'valid' needs min\(H, W\) > 96, got \(32, 64\)"),
        (ssim, (X[..., :5, :], X[..., :5, :], 1.0), {"padding": "valid"}, r"needs min\(H, W\) > 6"),
        (ms_ssim, (X, X, 1.0), {"scale_weights": []}, "scale_weights must not be empty"),
    ],
)
def test_bad_inputs(fn, args, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match) as err:
        fn(*args, **kwargs)
    assert "\n" not in str(err.value)
