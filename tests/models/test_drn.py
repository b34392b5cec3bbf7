"""The DRN module: its outputs in the target's units, and stations without history.

The network's outputs are checked by hand with its last layer set; the new-station rules on
hand-placed stations whose nearest neighbour on the great circle is not the one nearest in
latitude/longitude degrees (across the date line, over the pole).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ensml.errors import EnsmlError
from ensml.models.drn import DRN, SIGMA_FLOOR


def _constant_head(model: DRN, bias: list[float]) -> None:
    """Make the network's raw outputs the constants ``bias`` whatever the input."""
    with torch.no_grad():
        model.mlp[-1].weight.zero_()
        model.mlp[-1].bias.copy_(torch.tensor(bias))


def test_outputs_are_in_the_target_units() -> None:
    model = DRN(n_features=3, n_stations=4, n_raw=3)
    _constant_head(model, [0.5, -1.0, 0.25])
    model.y_loc.fill_(280.0)
    model.y_scale.fill_(4.0)
    mu, sigma, extra = model(torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0]))
    softplus = math.log1p(math.exp(-1.0))
    torch.testing.assert_close(mu, torch.full((5,), 280.0 + 4.0 * 0.5))
    torch.testing.assert_close(sigma, torch.full((5,), 4.0 * (softplus + SIGMA_FLOOR)))
    torch.testing.assert_close(extra, torch.full((5, 1), 0.25))  # raw: a family maps it


def test_features_are_standardised_and_the_embedding_reaches_the_output() -> None:
    torch.manual_seed(0)
    model = DRN(n_features=2, n_stations=3, embedding_dim=2, hidden=())  # linear: checkable
    model.x_loc.copy_(torch.tensor([10.0, -1.0]))
    model.x_scale.copy_(torch.tensor([2.0, 0.5]))
    x, s = torch.tensor([[12.0, 0.0], [8.0, -1.5]]), torch.tensor([2, 0])
    layer = model.mlp[-1]
    inputs = torch.cat([(x - model.x_loc) / model.x_scale, model.embedding.weight[s]], dim=1)
    mu, _, extra = model(x, s)
    torch.testing.assert_close(mu, (inputs @ layer.weight.T + layer.bias)[:, 0])
    assert extra is None


def test_without_an_embedding_the_station_is_ignored() -> None:
    model = DRN(n_features=2, n_stations=3, embedding_dim=0)
    assert model.embedding is None
    x = torch.randn(4, 2)
    a = model(x, torch.tensor([0, 1, 2, 0]))
    b = model(x, torch.tensor([2, 2, 2, 2]))
    torch.testing.assert_close(a[:2], b[:2])


def _placed() -> DRN:
    """Five stations; station 4 (next to every new station below) was never trained."""
    torch.manual_seed(1)
    model = DRN(n_features=1, n_stations=5, embedding_dim=3)
    model.station_lat.copy_(torch.tensor([50.0, 0.0, 0.0, 85.0, 84.9]))
    model.station_lon.copy_(torch.tensor([10.0, 179.0, -170.0, -90.0, 90.0]))
    model.trained.copy_(torch.tensor([True, True, True, True, False]))
    return model


# New stations and the trained station nearest on the great circle:
#  (0, -179.5): 1.5° from station 1 at lon 179 across the date line, 9.5° from station 2 (-170);
#  (85, 90): 10° from station 3 (85, -90) over the pole (180° of longitude away: in degrees,
#  station 0 at (50, 10) would look nearer);
#  (51, 11): 1.2° from station 0.
NEW_LAT, NEW_LON, NEAREST = [0.0, 85.0, 51.0], [-179.5, 90.0, 11.0], [1, 3, 0]


def test_nearest_is_on_the_great_circle_among_trained_stations() -> None:
    model = _placed()
    np.testing.assert_array_equal(model.nearest_trained(NEW_LAT, NEW_LON), NEAREST)
    embedding = model.new_station_embedding(np.array(NEW_LAT), np.array(NEW_LON))
    torch.testing.assert_close(embedding, model.embedding.weight.detach()[NEAREST])


def test_zero_gives_a_zero_embedding() -> None:
    embedding = _placed().new_station_embedding(NEW_LAT, NEW_LON, "zero")
    torch.testing.assert_close(embedding, torch.zeros(3, 3))


def test_with_new_stations_predicts_as_the_nearest_station() -> None:
    model = _placed()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grown = model.with_new_stations(NEW_LAT, NEW_LON)
    assert grown.n_stations == 8 and grown.embedding.weight.shape == (8, 3)
    x = torch.randn(3, 1)
    new = grown(x, torch.tensor([5, 6, 7]))
    old = model(x, torch.tensor(NEAREST))
    for a, b in zip(new[:2], old[:2]):
        torch.testing.assert_close(a, b)
    np.testing.assert_array_equal(grown.station_lat[5:].numpy(), np.float32(NEW_LAT))
    assert not grown.trained[5:].any()
    for k, v in model.state_dict().items():  # the original is unchanged
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    zero = model.with_new_stations(NEW_LAT, NEW_LON, "zero")
    torch.testing.assert_close(zero.embedding.weight[5:], torch.zeros(3, 3))


def test_fill_untrained_takes_the_nearest_trained_embedding() -> None:
    model = _placed()  # station 4 at (84.9, 90): its nearest trained is station 3 over the pole
    assert model.fill_untrained("nearest") == 1
    torch.testing.assert_close(model.embedding.weight[4], model.embedding.weight[3])
    model.trained[4] = False
    assert model.fill_untrained("zero") == 1
    torch.testing.assert_close(model.embedding.weight[4], torch.zeros(3))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda m: m.new_station_embedding([0.0], [0.0], "mean"),
            "method must be one of nearest, zero, got 'mean'",
        ),
        (
            lambda m: m.nearest_trained([0.0, 1.0], [0.0]),
            r"lat and lon must be 1-D of one length, got shapes \(2,\)",
        ),
        (
            lambda m: m.nearest_trained([91.0], [0.0]),
            r"lat in \[-90, 90\] degrees: 1 are not \(first: index 0, lat 91",
        ),
        (lambda m: m.nearest_trained([np.nan], [0.0]), "positions must be finite"),
        (lambda m: DRN(1, 2).nearest_trained([0.0], [0.0]), "DRN has no trained station"),
        (lambda m: DRN(1, 0), "DRN n_stations must be an integer >= 1, got 0"),
        (lambda m: DRN(1, 2, hidden=[8, 0]), r"DRN hidden must be positive integer widths, got \[8, 0\]"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(call, message: str) -> None:
    with pytest.raises(EnsmlError, match=message):
        call(_placed())
