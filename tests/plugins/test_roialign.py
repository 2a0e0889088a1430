"""ROIAlign_TRT reference: hand-worked values on a linear map, and ONNX Runtime's RoiAlign (opset 16) on random maps."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from trtverify.plugins.attrs import PluginError
from trtverify.plugins.roialign import roi_align

# X[0, 0, y, x] = 4y + x: bilinear interpolation of a linear map is exact, so samples have values worked by hand
LINEAR = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)


def align(x, rois, batch=None, **attrs):
    rois = np.asarray(rois, dtype=np.float32)
    batch = np.zeros(len(rois), dtype=np.int32) if batch is None else np.asarray(batch, dtype=np.int32)
    return roi_align(x, rois, batch, **{"plugin_version": "1", **attrs})


def test_sample_values_worked_by_hand():
    # output_half_pixel (0): roi [0,0,2,2] in 2 x 2 bins of 1 pixel, one sample per bin at its centre (y, x) =
    # (0.5, 0.5), (0.5, 1.5), (1.5, 0.5), (1.5, 1.5): 4y + x = 2.5, 3.5, 6.5, 7.5
    y = align(
        LINEAR, [[0, 0, 2, 2]], output_height=2, output_width=2, sampling_ratio=1, coordinate_transformation_mode=0
    )
    assert y.tolist() == [[[[2.5, 3.5], [6.5, 7.5]]]]
    # half_pixel (1): the roi moves by -0.5, samples at 0 and 1: 0, 1, 4, 5
    y = align(LINEAR, [[0, 0, 2, 2]], output_height=2, output_width=2, sampling_ratio=1)
    assert y.tolist() == [[[[0, 1], [4, 5]]]]
    # the same with ONNX's words
    y2 = align(
        LINEAR,
        [[0, 0, 2, 2]],
        output_height=2,
        output_width=2,
        sampling_ratio=1,
        coordinate_transformation_mode="half_pixel",
        mode="avg",
    )
    assert y2.tolist() == y.tolist()


def test_average_of_samples_and_spatial_scale():
    # one bin over [0, 4) x [0, 4) (spatial_scale 0.5 on a roi of [0, 0, 8, 8]), 2 x 2 samples at 1 and 3: mean of
    # 4y + x over y, x in {1, 3} = 4 * 2 + 2 = 10
    y = align(LINEAR, [[0, 0, 8, 8]], spatial_scale=0.5, sampling_ratio=2, coordinate_transformation_mode=0)
    assert y.tolist() == [[[[10.0]]]]
    # adaptive grid: ceil(4 / 1) = 4 samples per side at 0.5, 1.5, 2.5, 3.5; 3.5 is past the last row and column
    # (clamped to 3): mean over y of {0.5, 1.5, 2.5, 3} = 1.875, same for x: 4 * 1.875 + 1.875 = 9.375
    y = align(LINEAR, [[0, 0, 4, 4]], coordinate_transformation_mode=0)
    assert y.tolist() == [[[[9.375]]]]


def test_max_mode_takes_the_largest_weighted_corner():
    # sample at (0.5, 0.5): corners 0, 1, 4, 5 each weighted 0.25 -> 1.25 (ONNX Runtime's definition too)
    y = align(LINEAR, [[0, 0, 1, 1]], sampling_ratio=1, coordinate_transformation_mode=0, mode=0)
    assert y.tolist() == [[[[1.25]]]]
    assert (
        align(LINEAR, [[0, 0, 1, 1]], sampling_ratio=1, coordinate_transformation_mode=0, mode="max").tolist()
        == y.tolist()
    )


def test_samples_outside_the_map_are_zero():
    # every sample further than one pixel outside the map counts 0
    assert align(LINEAR, [[10, 10, 12, 12]], sampling_ratio=2).tolist() == [[[[0.0]]]]
    # output_half_pixel forces a roi to at least 1 x 1: [1, 1, 1, 1] samples at 1.5 -> 4 * 1.5 + 1.5
    assert align(LINEAR, [[1, 1, 1, 1]], sampling_ratio=1, coordinate_transformation_mode=0).tolist() == [[[[7.5]]]]


def test_empty_adaptive_grid_is_nan_like_the_plugin():
    # half_pixel, zero-height roi, sampling_ratio 0: ceil(0 / 1) = 0 samples, and the plugin divides 0 by 0
    y = align(LINEAR, [[0, 1, 3, 1]])
    assert np.isnan(y).all()
    assert align(LINEAR, [[0, 1, 3, 1]], mode=0).tolist() == [[[[0.0]]]]


def test_batch_indices_channels_and_types():
    x = np.stack([LINEAR[0], LINEAR[0] + 100]).repeat(3, axis=1).astype(np.float16)  # [2, 3, 4, 4]
    y = align(x, [[0, 0, 2, 2], [0, 0, 2, 2]], batch=[1, 0], output_height=2, output_width=2, sampling_ratio=1)
    assert y.dtype == np.float16 and y.shape == (2, 3, 2, 2)
    assert y[0, 2].tolist() == [[100, 101], [104, 105]] and y[1, 0].tolist() == [[0, 1], [4, 5]]
    assert align(LINEAR, np.zeros((0, 4))).shape == (0, 1, 1, 1)
    with pytest.raises(PluginError, match="ROIAlign_TRT: batch_indices must be in"):
        align(LINEAR, [[0, 0, 1, 1]], batch=[1])
    with pytest.raises(PluginError, match="mode"):
        align(LINEAR, [[0, 0, 1, 1]], mode="mean")


def onnx_roi_align(x, rois, batch, **attrs):
    node = helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y"], **attrs)
    graph = helper.make_graph(
        [node],
        "roi",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("rois", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("batch", TensorProto.INT64, None),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ONNX Runtime warns about its max mode on every run
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x, "rois": rois, "batch": batch.astype(np.int64)})[0]


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling", [0, 2])
def test_matches_onnx_runtime(mode, transform, sampling):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 5, 13, 17)).astype(np.float32)
    # rois inside, across the border, partly outside, larger than the map; none of zero size under half_pixel
    corner = rng.uniform(-4, 16, size=(40, 2))
    size = rng.uniform(0.5, 20, size=(40, 2))
    rois = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    batch = rng.integers(0, 2, 40)
    attrs = dict(mode=mode, coordinate_transformation_mode=transform, sampling_ratio=sampling, spatial_scale=0.75)
    want = onnx_roi_align(x, rois, batch, output_height=3, output_width=4, **attrs)
    got = roi_align(x, rois, batch.astype(np.int32), output_height=3, output_width=4, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
